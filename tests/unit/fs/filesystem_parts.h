#pragma once
// A Filesystem over a fake tree at commit "c1" and no network (an offline Hub, no cache), with
// the synthetic root (current, targets/) the fixture sets up: for the tests of the Filesystem
// and of the FUSE op table above it.

#include "cache/tiered_cache.h"
#include "fs/hub/offline_hub.h"
#include "fs/namespace/targets_view.h"
#include "fs/vfs/filesystem.h"
#include "tests/unit/namespace/fake_source.h"

namespace whfs::testing {

struct FilesystemParts {
  ns::testing::FakeSource src_;
  ns::TargetsView view_{src_, target::HostPlatform{"x86_64", "2.36"}};
  ns::Namespace names_{src_, "c1", 1000};
  cache::NullCache cache_{"/nonexistent", "no cache in this test"};
  hub::OfflineHub hub_;
  cache::AccessScope scope_{std::string(cache::kPublicAudience)};
  reader::ReadPathStats stats_;
  reader::ServingGate gate_{scope_, {}, reader::FetcherConfig{}, stats_};
  reader::Reader reader_{cache_, hub_, gate_, stats_, reader::ReaderConfig{}};
  Filesystem fs_{names_, reader_, config()};

  static FilesystemConfig config() {
    FilesystemConfig c;
    c.read_timeout = std::chrono::seconds(30);
    return c;
  }
};

}  // namespace whfs::testing
