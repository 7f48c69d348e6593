#include "fs/reader/fetcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <utility>

namespace whfs::reader {

Fetcher::Fetcher(cache::BlockStore& store, hub::HubClient& hub, ServingGate& gate,
                 ReadPathStats& stats, FetcherConfig config)
    : store_(store),
      gate_(gate),
      stats_(stats),
      config_(config),
      memory_(config_.memory_limit, stats),
      verifier_(store, gate, config_, stats),
      claims_(
          Claims::Cache{[&store](const cache::ContentId& id) { return store.claim_download(id); },
                        [&store](const cache::ContentId& id) { return store.content_state(id); }},
          config_.claim_takeover, stats),
      downloads_(
          store, hub, config_, stats,
          [this](const FileContent& c, const cache::ContentState& s) {
            return verify_cached(c, s.verified);
          },
          [this](const FileContent& c) { fetched_here(c); }) {}

Fetcher::~Fetcher() { shutdown(); }

void Fetcher::shutdown() {
  downloads_.shutdown();
  memory_.drop_pending();
}

std::optional<ReadError> Fetcher::refused(const FileContent& c) {
  if (downloads_.stopping()) return cancelled_error("shutting down");
  return gate_.blocked(c.id, c.path);
}

Expected<void, ReadError> Fetcher::verify_cached(const FileContent& c, bool recorded) {
  return verifier_.verify_cached(c, recorded, [&] { return downloads_.refill_cache(c); });
}

std::optional<std::vector<std::uint32_t>> Fetcher::missing_of(const FileContent& c, BlockRange r,
                                                              bool stored) {
  if (stored) return downloads_.missing_blocks(c, r);
  std::vector<std::uint32_t> all(r.count);
  for (std::uint32_t i = 0; i < r.count; ++i) all[i] = r.first + i;
  return all;
}

// ---- who may read what ---------------------------------------------------------------------

Expected<bool, ReadError> Fetcher::admit(const FileContent& c, const WaitPolicy& wait) {
  if (gate_.admitted(c.id)) return true;
  if (auto g = store_.granted(c.id, gate_.scope().readable()); g && *g) {
    gate_.admit(c.id);
    return true;
  }
  return prove(c, wait);
}

Expected<bool, ReadError> Fetcher::prove(const FileContent& c, const WaitPolicy& wait) {
  const std::uint32_t bs = store_.block_size();
  const std::uint32_t total = block_count(c.size, bs);
  auto missing = downloads_.missing_blocks(c, BlockRange{0, total});
  if (!missing || missing->size() == total) return false;  // nothing stored: fetch it
  if (missing->empty()) {
    // The cache withholds a complete content until it matched its hash: hash it first (a
    // mismatch drops it, and it is fetched like any other).
    if (auto st = store_.content_state(c.id); st && *st && !(*st)->verified) {
      if (auto v = verify_cached(c, false); !v) return unexpected(v.error());
    }
  }
  std::vector<std::uint32_t> stored;
  stored.reserve(total - missing->size());
  for (std::uint32_t b = 0, m = 0; b < total; ++b) {
    if (m < missing->size() && (*missing)[m] == b) {
      ++m;
    } else {
      stored.push_back(b);
    }
  }
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::uint32_t block = stored[rng() % stored.size()];
  const std::uint64_t start = static_cast<std::uint64_t>(block) * bs;
  const std::uint64_t block_len = std::min<std::uint64_t>(bs, c.size - start);
  const auto len = static_cast<std::size_t>(std::min<std::uint64_t>(kProofBytes, block_len));
  const std::uint64_t offset = start + rng() % (block_len - len + 1);
  auto ours = copy_present(c, offset, len);
  if (!ours) return false;  // gone meanwhile: fetch it
  std::string hubs(len, '\0');
  auto got = downloads_.get_range(c, offset, std::as_writable_bytes(std::span<char>(hubs)),
                                  Clock::now() + config_.request_timeout, wait.cancel);
  if (!got) return unexpected(got.error());
  if (hubs != *ours) {
    spdlog::error(
        "{}: the Hub's bytes at {} differ from the cached copy another mount fetched; "
        "not served",
        c.path, offset);
    return unexpected(
        ReadError{FsErrorKind::kIo, c.path + ": the Hub's bytes differ from the cached copy"});
  }
  spdlog::debug("{}: may read the cached copy (proved with {} bytes at {})", c.path, len, offset);
  fetched_here(c);
  return true;
}

void Fetcher::fetched_here(const FileContent& c) {
  if (!gate_.admit(c.id)) return;
  if (auto r = store_.grant(c.id, gate_.scope().write()); !r) {
    spdlog::debug("{}: no grant recorded in the cache ({})", c.path, r.error().message);
  }
}

// ---- ensure ------------------------------------------------------------------------------

Expected<Source, ReadError> Fetcher::ensure(const FileContent& content, BlockRange need,
                                            const WaitPolicy& wait,
                                            std::optional<BlockRange> then) {
  if (auto e = refused(content)) return unexpected(std::move(*e));
  if (auto m = memory_.hit(content.id)) return Source{std::move(m), {}};
  auto r = gate_.streams(content.id) ? ensure_streaming(content, need, wait, then)
                                     : ensure_verified(content, wait);
  // Nothing of the cache is served before this point: it is admitted here (by a download of
  // this process, a grant of its audiences, or a proof), and the gate's verdict goes back.
  if (r && !r->memory) {
    if (auto a = admit(content, wait); !a) {
      r = unexpected(a.error());
    } else {
      r->verdict = gate_.verdict(content.id);
    }
  }
  if (!r) {
    gate_.remember_failure(content.id, r.error());
    if (r.error().kind == FsErrorKind::kInterrupted && wait.cancel && wait.cancel->cancelled()) {
      stats_.interrupted.add();
    }
  }
  return r;
}

Expected<Source, ReadError> Fetcher::ensure_verified(const FileContent& c, const WaitPolicy& wait) {
  auto state = store_.content_state(c.id);
  if (!state) return fetch_to_memory(c, wait, "the cache cannot be read: " + state.error().message);
  if (*state && (*state)->complete()) {
    if (auto v = verify_cached(c, (*state)->verified); !v) return unexpected(v.error());
    if (gate_.serves_verified(c.id)) return Source{};
    // (Blocks went missing while it was hashed: they are fetched below.)
  }
  const std::uint32_t total = block_count(c.size, store_.block_size());
  auto missing = missing_of(c, BlockRange{0, total}, state->has_value());
  if (!missing) return fetch_to_memory(c, wait, "the cache cannot be read");
  if (missing->empty()) {  // completed meanwhile by someone else: hashed here
    if (auto v = verify_cached(c, false); !v) return unexpected(v.error());
    return Source{};
  }
  gate_.distrust(c.id);  // its blocks are changing
  // Another process sharing the cache may be downloading it already: wait for its blocks
  // rather than have the Hub serve them twice.
  auto claimed = claims_.claim_or_wait(c, wait);
  if (!claimed) return unexpected(claimed.error());
  if (claimed->finished) {
    if (auto v = verify_cached(c, claimed->finished->verified); !v) return unexpected(v.error());
    return Source{};
  }
  // In file order (blocks another process stored meanwhile are skipped by the downloads).
  // Nothing of the file is served before all of it matched its hash, and the hash follows the
  // blocks from the front as they arrive: the read's own blocks first would only hold the hash
  // back. (The kernel's readahead READs reach the request threads in any order: when one of
  // them planned the file from its own offset, the front came last, and the whole file was
  // hashed after its last byte arrived.)
  auto r = downloads_.fetch_blocks(c, *missing, wait, std::nullopt);
  if (!r) return unexpected(r.error());
  if (*r == Stored::kNotKept) return fetch_to_memory(c, wait, "the cache could not keep it");
  return Source{};  // verified by the download that completed it
}

Expected<Source, ReadError> Fetcher::ensure_streaming(const FileContent& c, BlockRange need,
                                                      const WaitPolicy& wait,
                                                      std::optional<BlockRange> then) {
  auto state = store_.content_state(c.id);
  if (!state) return fetch_to_memory(c, wait, "the cache cannot be read: " + state.error().message);
  if (*state && (*state)->complete()) {
    if (auto v = verify_cached(c, (*state)->verified); !v) return unexpected(v.error());
    return Source{};
  }
  auto missing = missing_of(c, need, state->has_value());
  if (!missing) return fetch_to_memory(c, wait, "the cache cannot be read");
  if (missing->empty()) return Source{};
  auto r = downloads_.fetch_blocks(c, *missing, wait, then);
  if (!r) return unexpected(r.error());
  if (*r == Stored::kNotKept) return fetch_to_memory(c, wait, "the cache could not keep it");
  return Source{};
}

// ---- the memory path ---------------------------------------------------------------------

Expected<Source, ReadError> Fetcher::fetch_to_memory(const FileContent& c, const WaitPolicy& wait,
                                                     const std::string& why) {
  if (downloads_.stopping()) return unexpected(cancelled_error("shutting down"));
  auto joined = memory_.join_or_plan(c, why, [&] {
    return downloads_.plan_buffer(c, [this](Downloads::BufferFetch& m) { finish_memory_fetch(m); });
  });
  if (!joined) return unexpected(joined.error());
  if (joined->mine) downloads_.start_pieces(joined->pieces);
  if (auto w = downloads_.wait_for(c, joined->pieces, wait); !w) return unexpected(w.error());
  const auto& m = *joined->fetch;
  std::lock_guard lock(joined->fetch->mu);
  if (m.error) return unexpected(*m.error);
  return Source{m.result, {}};
}

void Fetcher::finish_memory_fetch(Downloads::BufferFetch& m) {
  const FileContent& c = m.content;
  std::optional<ReadError> error;
  {
    std::lock_guard lock(m.mu);
    error = m.error;
  }
  if (!error) {
    const std::span<std::byte> data(m.data.get(), c.size);
    auto v =
        verifier_.verify_buffer(c, data, [&] { return downloads_.refill_buffer(c, data.data()); });
    if (!v) error = v.error();
  }
  std::shared_ptr<const MemoryContent> result;
  if (!error) {
    auto mc = std::make_shared<MemoryContent>();
    mc->data = std::move(m.data);
    mc->size = c.size;
    result = std::move(mc);
  }
  memory_.finish(m, result);
  std::lock_guard lock(m.mu);
  m.error = error;
  m.result = std::move(result);
}

// ---- peek --------------------------------------------------------------------------------

Expected<std::string, ReadError> Fetcher::peek(const FileContent& c, std::uint64_t offset,
                                               std::size_t size, const WaitPolicy& wait) {
  if (offset >= c.size) return std::string();
  size = static_cast<std::size_t>(std::min<std::uint64_t>(size, c.size - offset));
  if (auto e = refused(c)) return unexpected(std::move(*e));
  if (auto m = memory_.hit(c.id)) {
    return std::string(reinterpret_cast<const char*>(m->data.get() + offset), size);
  }
  if (gate_.may_peek_cache(c.id)) {
    auto bytes = peek_cache(c, offset, size, wait);
    if (!bytes) {
      gate_.remember_failure(c.id, bytes.error());
      return unexpected(bytes.error());
    }
    if (*bytes) return std::move(**bytes);
  }
  // The cache cannot give them: one GET of just these bytes.
  std::string out(size, '\0');
  auto got = downloads_.get_range(c, offset, std::as_writable_bytes(std::span<char>(out)),
                                  Clock::now() + config_.request_timeout, wait.cancel);
  if (!got) return unexpected(got.error());
  return out;
}

Expected<std::optional<std::string>, ReadError> Fetcher::peek_cache(const FileContent& c,
                                                                    std::uint64_t offset,
                                                                    std::size_t size,
                                                                    const WaitPolicy& wait) {
  if (auto a = admit(c, wait); !a) return unexpected(a.error());
  // Only what this process may read (another audience's blocks may appear at any time).
  if (gate_.admitted(c.id)) {
    if (auto bytes = copy_present(c, offset, size)) return bytes;
  }
  if (auto state = store_.content_state(c.id);
      state && *state && (*state)->complete() && !(*state)->verified) {
    // A complete content that was not hashed yet is withheld by the cache: hash it (here).
    if (auto v = verify_cached(c, false); !v) return unexpected(v.error());
  } else {
    auto missing =
        downloads_.missing_blocks(c, blocks_for(offset, size, c.size, store_.block_size()));
    if (!missing) return std::nullopt;
    if (!missing->empty()) {
      auto r = downloads_.fetch_blocks(c, *missing, wait, std::nullopt);  // (admits this process)
      if (!r) return unexpected(r.error());
      if (*r == Stored::kNotKept) return std::nullopt;
    } else if (!gate_.admitted(c.id)) {
      // Stored by another process meanwhile: readable once proven.
      if (auto p = prove(c, wait); !p) return unexpected(p.error());
    }
  }
  if (!gate_.admitted(c.id)) return std::nullopt;
  return copy_present(c, offset, size);  // (nullopt: gone meanwhile)
}

std::optional<std::string> Fetcher::copy_present(const FileContent& c, std::uint64_t offset,
                                                 std::size_t size) {
  const std::uint32_t bs = store_.block_size();
  const BlockRange r = blocks_for(offset, size, c.size, bs);
  std::string out;
  out.reserve(size);
  bool gap = false;
  auto missing = store_.read_blocks(
      c.id, c.size, r.first, r.count,
      [&](std::uint32_t index, std::span<const std::byte> bytes) {
        const std::uint64_t start = static_cast<std::uint64_t>(index) * bs;
        if (gap || start > offset + out.size()) {
          gap = true;
          return;
        }
        const std::uint64_t from = offset + out.size() - start;
        const std::uint64_t to = std::min<std::uint64_t>(offset + size - start, bytes.size());
        if (from < to) {
          out.append(reinterpret_cast<const char*>(bytes.data() + from),
                     static_cast<std::size_t>(to - from));
        }
      },
      cache::BlockStore::ReadMode::kPartial);
  if (!missing || !missing->empty() || gap || out.size() != size) return std::nullopt;
  return out;
}

}  // namespace whfs::reader
