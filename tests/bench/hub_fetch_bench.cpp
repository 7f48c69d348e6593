// Benchmark, not a test: fetch one file through HubClient::stream_range with N parallel ranged
// GETs and print MiB/s. tests/bench/hub_fetch.sh runs it beside curl and aria2c against the
// emulator in WAN mode.
//
//   hub_fetch_bench ENDPOINT REPO PATH SIZE PARALLEL [CHUNK_MIB]
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "fs/hub/hub_client.h"

int main(int argc, char** argv) {
  using namespace whfs::hub;
  using whfs::Clock;
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s ENDPOINT REPO PATH SIZE PARALLEL [CHUNK_MIB]\n", argv[0]);
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  HubClientConfig cfg;
  cfg.transport.endpoint = argv[1];
  cfg.repo = *parse_repo_ref(argv[2]);
  const std::string path = argv[3];
  const std::uint64_t size = std::stoull(argv[4]);
  const int parallel = std::stoi(argv[5]);
  const std::uint64_t chunk = (argc > 6 ? std::stoull(argv[6]) : 8) << 20;
  auto client = make_hub_client(cfg);
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  auto rev = client->resolve_revision("main", deadline);
  if (!rev) {
    std::fprintf(stderr, "%s\n", rev.error().describe().c_str());
    return 1;
  }
  const FileRef file{rev->commit, path, size};
  std::vector<std::byte> buf(size);
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t) {
    threads.emplace_back([&] {
      while (true) {
        const std::uint64_t off = next.fetch_add(chunk);
        if (off >= size) return;
        const std::uint64_t len = std::min(chunk, size - off);
        std::uint64_t filled = off;
        auto take = [&](std::span<const std::byte> bytes) {
          std::copy(bytes.begin(), bytes.end(), buf.begin() + static_cast<std::ptrdiff_t>(filled));
          filled += bytes.size();
        };
        auto r = client->stream_range(file, off, len, deadline, nullptr, take);
        if (!r) {
          std::fprintf(stderr, "%s\n", r.error().describe().c_str());
          failed = true;
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed) return 1;
  std::printf("%.3f s, %.1f MiB/s, %llu requests\n", secs,
              static_cast<double>(size) / secs / (1 << 20),
              static_cast<unsigned long long>(client->stats().requests.load()));
  return 0;
}
