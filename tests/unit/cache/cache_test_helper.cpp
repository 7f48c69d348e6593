// The cache tests' child processes (run by the tests, not by ctest):
//   write-loop DIR SEED                  writes, verifies and reads contents until killed
//   write-set DIR SEED COUNT SHARED CAP GO
//                                        once file GO exists ("-": at once), writes COUNT own
//                                        contents and SHARED contents that every helper
//                                        writes, verifies all; exit 0 if all good
//   pin DIR ID READY_FILE                pins ID, creates READY_FILE, sleeps until killed
//   write-threads DIR SEED N             N threads of write-loop on one cache until killed
//   plant DIR SHA256 SIZE INDEX          replaces a byte of block INDEX of a stored content
//                                        (with a valid block checksum), leaving its record
//                                        "verified": what a hostile writer could do
//   make-fixture OUT                     writes the golden fixture to OUT/data.mdb
//   plant-listing DIR ENDPOINT REPO COMMIT PATH FILE
//                                        rewrites the cached listing of PATH's folder so that
//                                        PATH has FILE's sha256 and size, and stores FILE's
//                                        bytes as that content, verified: a listing and blocks
//                                        that agree, as a hostile writer could leave them
//   plant-metadata DIR SHA256 FILE       records FILE as the METADATA of the wheel SHA256,
//                                        "verified" (what pip would be told it depends on)

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "cache/lmdb.h"
#include "cache/records.h"
#include "tests/unit/cache/test_support.h"

namespace t = whfs::cache::testing;
using whfs::cache::BlockCache;
using whfs::cache::ContentId;

namespace {

int fail(const std::string& what) {
  std::fprintf(stderr, "cache_test_helper[%d]: %s\n", ::getpid(), what.c_str());
  return 1;
}

std::unique_ptr<BlockCache> open_cache(const std::string& dir, std::uint64_t cap,
                                       std::uint32_t block_pages) {
  auto c = BlockCache::open(t::test_options(dir, cap, block_pages));
  if (!c) {
    fail("open: " + c.error().message);
    std::exit(1);
  }
  return std::move(*c);
}

// Puts `bytes` in chunks of 1..8 blocks, starting at a random block and wrapping around.
bool put_scattered(BlockCache& cache, const ContentId& id, const std::vector<std::byte>& bytes,
                   std::mt19937_64& rng) {
  const std::uint32_t bs = cache.block_size();
  const auto total = static_cast<std::uint32_t>((bytes.size() + bs - 1) / bs);
  const std::uint32_t start = static_cast<std::uint32_t>(rng() % total);
  for (std::uint32_t done = 0; done < total;) {
    const std::uint32_t first = (start + done) % total;
    const std::uint32_t n = std::min<std::uint32_t>(
        {static_cast<std::uint32_t>(1 + rng() % 8), total - done, total - first});
    const std::size_t off = std::size_t{first} * bs;
    const std::size_t len = std::min(bytes.size() - off, std::size_t{n} * bs);
    auto r = cache.put_blocks(id, bytes.size(), first, std::span(bytes).subspan(off, len));
    if (!r) return fail("put: " + r.error().message) == 0;
    done += n;
  }
  return true;
}

ContentId id_for(std::uint64_t key, const std::vector<std::byte>& bytes) {
  return key % 3 == 0 ? t::git_blob_of(bytes) : t::sha256_of(bytes);
}

int write_loop(const std::string& dir, std::uint64_t seed) {
  auto cache = open_cache(dir, 8 << 20, 2);
  std::mt19937_64 rng(seed);
  for (std::uint64_t i = 0;; ++i) {
    const std::uint64_t key = seed * 1000000 + i;
    const auto bytes = t::self_describing(key, 1 + rng() % 200000, cache->block_size());
    const ContentId id = id_for(key, bytes);
    if (!put_scattered(*cache, id, bytes, rng)) return 1;
    auto v = cache->verify_content(id, bytes.size());
    if (!v && v.error().kind == whfs::cache::CacheError::Kind::kCorrupt) return fail("corrupt");
    if (i % 5 == 0) {
      (void)cache->put_revision("https://hub", "org/repo", "rev" + std::to_string(i % 7),
                                t::kPublic, std::to_string(key), std::chrono::system_clock::now());
      (void)cache->put_listing("https://hub.example", "org/repo", std::to_string(key), "",
                               t::kPublic, t::Fixture::listing());
    }
    if (i % 3 == 0) (void)t::read_all(*cache, id, bytes.size());
  }
}

int write_set(const std::string& dir, std::uint64_t seed, int count, int shared, std::uint64_t cap,
              const std::string& go) {
  std::printf("pid %d\n", ::getpid());
  std::fflush(stdout);
  auto cache = open_cache(dir, cap, 2);
  while (go != "-" && !std::filesystem::exists(go)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> keys;
  for (int i = 0; i < shared; ++i) keys.push_back(900000 + i);
  for (int i = 0; i < count; ++i) keys.push_back(seed * 1000 + i);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (std::uint64_t key : keys) {
    const auto bytes = t::self_describing(key, 50000 + key % 100000, cache->block_size());
    const ContentId id = id_for(key, bytes);
    if (!put_scattered(*cache, id, bytes, rng)) return 1;
    auto v = cache->verify_content(id, bytes.size());
    if (!v) return fail("verify: " + v.error().message);
    if (!v->verified) return fail("not verified: " + id.to_string());
    auto back = t::read_all(*cache, id, bytes.size());
    if (!back || *back != bytes) return fail("read back differs: " + id.to_string());
  }
  return 0;
}

int write_threads(const std::string& dir, std::uint64_t seed, int n) {
  auto cache = open_cache(dir, 64 << 20, 2);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 100 + static_cast<std::uint64_t>(t));
      for (std::uint64_t i = 0;; ++i) {
        const std::uint64_t key = (seed * 100 + static_cast<std::uint64_t>(t)) * 1000000 + i;
        const auto bytes = t::self_describing(key, 1 + rng() % 100000, cache->block_size());
        const ContentId id = id_for(key, bytes);
        // A put that finds no room or waits too long is a miss for a mount, not a failure;
        // only wrong bytes are.
        auto put = cache->put_blocks(id, bytes.size(), 0, bytes);
        if (!put && put.error().kind != whfs::cache::CacheError::Kind::kFull &&
            put.error().kind != whfs::cache::CacheError::Kind::kBusy) {
          fail("put: " + put.error().message);
          std::_Exit(1);
        }
        auto v = cache->verify_content(id, bytes.size());
        if (!v && v.error().kind == whfs::cache::CacheError::Kind::kCorrupt) {
          fail("corrupt");
          std::_Exit(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}

int plant(const std::string& dir, const std::string& sha, std::uint64_t size, std::uint32_t index) {
  namespace c = whfs::cache;
  const auto id = ContentId::from_hex(ContentId::Kind::kSha256, sha);
  if (!id) return fail("bad sha256");
  auto env = c::lmdb::Env::open(dir, {.max_dbs = 16, .flags = MDB_NOSYNC});
  if (!env) return fail(env.error().message());
  auto txn = c::lmdb::Txn::begin(*env, 0);
  if (!txn) return fail(txn.error().message());
  auto dbi = txn->open_dbi(c::kBlocksDb, 0);
  if (!dbi) return fail(dbi.error().message());
  const auto key = c::block_key(*id, index);
  auto v = txn->get(*dbi, key.bytes());
  if (!v || !*v) return fail("no such block");
  std::string value(c::lmdb::as_chars(**v));
  value[8 + (size % 100)] ^= 0x5a;
  const auto payload = std::as_bytes(std::span(value)).subspan(8);
  const std::uint64_t sum = c::block_checksum(key.bytes(), payload);
  for (int i = 0; i < 8; ++i)
    value[static_cast<std::size_t>(i)] = static_cast<char>(sum >> (8 * i) & 0xff);
  if (!txn->put(*dbi, key.bytes(), c::lmdb::as_bytes(value))) return fail("put");
  if (!txn->commit()) return fail("commit");
  return 0;
}

int pin(const std::string& dir, const std::string& id_text, const std::string& ready) {
  auto cache = open_cache(dir, 0, 1);
  const auto id = ContentId::parse(id_text);
  if (!id) return fail("bad id");
  if (auto r = cache->pin(*id); !r) return fail("pin: " + r.error().message);
  std::ofstream(ready) << "pinned\n";
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int make_fixture(const std::filesystem::path& out) {
  using F = t::Fixture;
  const auto build = out / "fixture-build";
  std::filesystem::remove_all(build);
  {
    auto cache = open_cache(build, F::kCap, F::kBlockPages);
    const auto lfs = F::lfs_bytes();
    const auto plain = F::plain_bytes();
    t::put_all(*cache, t::sha256_of(lfs), lfs);
    if (!cache->verify_content(t::sha256_of(lfs), lfs.size())) return fail("verify");
    t::put_all(*cache, t::git_blob_of(plain), plain);
    const auto resolved =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(F::kResolvedMs));
    if (!cache->put_revision(F::kEndpoint, F::kRepo, F::kRev, t::kPublic, F::kCommit, resolved) ||
        !cache->put_listing(F::kEndpoint, F::kRepo, F::kCommit, "", t::kPublic, F::listing())) {
      return fail("metadata");
    }
  }
  auto env = whfs::cache::lmdb::Env::open(build.string(), {.max_dbs = 16, .flags = MDB_RDONLY});
  if (!env) return fail(env.error().message());
  const auto copy = out / "fixture-copy";
  std::filesystem::remove_all(copy);
  std::filesystem::create_directories(copy);
  if (auto r = env->copy_compact(copy.string()); !r) return fail(r.error().message());
  std::filesystem::rename(copy / "data.mdb", out / "data.mdb");
  std::filesystem::remove_all(copy);
  std::filesystem::remove_all(build);
  std::printf("wrote %s\n", (out / "data.mdb").c_str());
  return 0;
}

int plant_listing(const std::string& dir, const std::string& endpoint, const std::string& repo,
                  const std::string& commit, const std::string& path, const std::string& file) {
  whfs::cache::Options o;
  o.dir = dir;
  o.cap_bytes = 0;  // keep the cache's own
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fail("stat " + dir);
  if (st.st_uid != ::geteuid()) o.access.group = st.st_gid;  // a member of its group
  auto c = BlockCache::open(o);
  if (!c) return fail("open: " + c.error().message);
  const auto slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "" : path.substr(0, slash);
  auto listing = (*c)->get_listing(endpoint, repo, commit, folder, t::kPublicOnly);
  if (!listing || !*listing) return fail("no cached listing of \"" + folder + "\"");
  std::ifstream in(file, std::ios::binary);
  std::ostringstream read;
  read << in.rdbuf();
  const std::string text = read.str();
  const auto bytes = std::as_bytes(std::span(text));
  const ContentId id = t::sha256_of(bytes);
  bool found = false;
  for (auto& e : **listing) {
    if (e.path != path) continue;
    e.lfs_sha256 = id.hex();
    e.size = bytes.size();
    found = true;
  }
  if (!found) return fail("no " + path + " in the cached listing");
  if (!(*c)->put_listing(endpoint, repo, commit, folder, t::kPublic, **listing))
    return fail("put_listing");
  t::put_all(**c, id, bytes);
  if (!(*c)->verify_content(id, bytes.size())) return fail("verify");
  // Whoever can write the cache can write grants too (cache/audience.h).
  if (!(*c)->grant(id, t::kPublic)) return fail("grant");
  std::printf("planted %s as %s\n", path.c_str(), id.to_string().c_str());
  return 0;
}

int plant_metadata(const std::string& dir, const std::string& sha, const std::string& file) {
  whfs::cache::Options o;
  o.dir = dir;
  o.cap_bytes = 0;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fail("stat " + dir);
  if (st.st_uid != ::geteuid()) o.access.group = st.st_gid;
  auto c = BlockCache::open(o);
  if (!c) return fail("open: " + c.error().message);
  std::ifstream in(file, std::ios::binary);
  std::ostringstream read;
  read << in.rdbuf();
  const auto id = ContentId::from_hex(ContentId::Kind::kSha256, sha);
  if (!id) return fail("bad sha256");
  if (!(*c)->put_wheel_metadata(id->to_string(), t::kPublic, {read.str(), true}))
    return fail("put");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 3 && a[0] == "write-loop") return write_loop(a[1], std::stoull(a[2]));
  if (a.size() == 7 && a[0] == "write-set") {
    return write_set(a[1], std::stoull(a[2]), std::stoi(a[3]), std::stoi(a[4]), std::stoull(a[5]),
                     a[6]);
  }
  if (a.size() == 4 && a[0] == "pin") return pin(a[1], a[2], a[3]);
  if (a.size() == 2 && a[0] == "make-fixture") return make_fixture(a[1]);
  if (a.size() == 4 && a[0] == "write-threads") {
    return write_threads(a[1], std::stoull(a[2]), std::stoi(a[3]));
  }
  if (a.size() == 5 && a[0] == "plant") {
    return plant(a[1], a[2], std::stoull(a[3]), static_cast<std::uint32_t>(std::stoul(a[4])));
  }
  if (a.size() == 4 && a[0] == "plant-metadata") return plant_metadata(a[1], a[2], a[3]);
  if (a.size() == 7 && a[0] == "plant-listing") {
    return plant_listing(a[1], a[2], a[3], a[4], a[5], a[6]);
  }
  std::fprintf(stderr, "usage: see the comment at the top of cache_test_helper.cpp\n");
  return 2;
}
