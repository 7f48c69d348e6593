// CachedListingSource against a listing-store double that can lose and refuse records, and a
// Hub double that counts its listings.
#include "fs/vfs/listing_source.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <tuple>

#include "tests/unit/fs/memory_metadata.h"

namespace whfs {
namespace {

using namespace std::chrono_literals;
using testing::MemoryMetadata;

RemoteEntry dir(const std::string& path) {
  RemoteEntry e;
  e.path = path;
  e.type = RemoteEntry::Type::kDirectory;
  e.oid = std::string(40, 'd');
  return e;
}

RemoteEntry file(const std::string& path) {
  RemoteEntry e;
  e.path = path;
  e.size = 3;
  e.oid = std::string(40, 'f');
  return e;
}

// A repo of two folders: pkg/ (with sub/) and other/.
class ListingHub : public hub::HubClient {
 public:
  Expected<hub::Revision, hub::HubError> resolve_revision(std::string_view, Deadline) override {
    return hub::Revision{std::string(40, 'a'), ""};
  }
  Expected<std::vector<RemoteEntry>, hub::HubError> list_folder(std::string_view,
                                                                std::string_view folder,
                                                                bool recursive, Deadline,
                                                                std::size_t) override {
    ++calls;
    if (down)
      return unexpected(hub::HubError{hub::HubErrorKind::kUnavailable, "down", 0, "", "", ""});
    if (too_many && recursive) {
      hub::HubError e{hub::HubErrorKind::kBadResponse, "too many", 0, "TooManyEntries", "", ""};
      return unexpected(e);
    }
    std::vector<RemoteEntry> all = {
        dir("pkg"),   dir("pkg/sub"),      file("pkg/a.whl"), file("pkg/sub/b.whl"),
        dir("other"), file("other/c.whl"), file("README.md")};
    std::vector<RemoteEntry> out;
    for (const auto& e : all) {
      const auto slash = e.path.rfind('/');
      const std::string parent = slash == std::string::npos ? "" : e.path.substr(0, slash);
      const bool under = folder.empty() || e.path.starts_with(std::string(folder) + "/");
      if (recursive ? under : parent == folder) out.push_back(e);
    }
    return out;
  }
  Expected<void, hub::HubError> stream_range(const hub::FileRef&, std::uint64_t, std::uint64_t,
                                             Deadline, const CancelFlag*, ChunkFn) override {
    return unexpected(hub::HubError{hub::HubErrorKind::kUnavailable, "no", 0, "", "", ""});
  }
  const hub::HubStats& stats() const override { return stats_; }
  void cancel() override {}

  int calls = 0;
  bool down = false;
  bool too_many = false;

 private:
  hub::HubStats stats_;
};

class ListingSourceTest : public ::testing::Test {
 protected:
  const cache::AccessScope kScope{std::string(cache::kPublicAudience)};
  reader::ReadPathStats stats;
  // The serving gates of a private cache (its listings believed) and of a shared one.
  const reader::ServingGate believing{kScope, {true, "private"}, {}, stats};
  const reader::ServingGate wary_gate{kScope, {false, "shared"}, {}, stats};
  MemoryMetadata store;
  ListingHub hub;
  const std::string commit = std::string(40, 'c');
  CachedListingSource source{hub, store, believing, "https://hub.example", "org/repo", 5s};
};

std::vector<std::string> paths(const std::vector<RemoteEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.path);
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(ListingSourceTest, OneRecursiveCallListsAndKeepsEveryFolderOfTheSubtree) {
  auto root = source.list(commit, "");
  ASSERT_TRUE(root);
  EXPECT_EQ(paths(*root), (std::vector<std::string>{"README.md", "other", "pkg"}));
  EXPECT_EQ(hub.calls, 1);
  // Every folder of the subtree came with it: no further request.
  EXPECT_EQ(paths(source.list(commit, "pkg").value()),
            (std::vector<std::string>{"pkg/a.whl", "pkg/sub"}));
  EXPECT_EQ(paths(source.list(commit, "pkg/sub").value()),
            (std::vector<std::string>{"pkg/sub/b.whl"}));
  EXPECT_EQ(hub.calls, 1);
  EXPECT_EQ(store.listings.count({"https://hub.example", "org/repo", commit, "pkg/sub", "public"}),
            1u);
}

TEST_F(ListingSourceTest, StoredListingsServeAStartWithTheHubDown) {
  ASSERT_TRUE(source.list(commit, ""));
  hub.down = true;
  CachedListingSource again(hub, store, believing, "https://hub.example", "org/repo", 5s);
  EXPECT_TRUE(again.list(commit, "pkg"));
  // Another endpoint's listings are not this one's.
  CachedListingSource other(hub, store, believing, "http://site-cache:8080", "org/repo", 5s);
  auto r = other.list(commit, "pkg");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kIo);
}

TEST_F(ListingSourceTest, AStoreThatRefusesOrLosesListingsCostsRequestsNotErrors) {
  store.refuse = true;
  EXPECT_TRUE(source.list(commit, "pkg"));
  EXPECT_TRUE(source.list(commit, "pkg"));
  EXPECT_EQ(hub.calls, 2);  // nothing kept: listed again
  store.refuse = false;
  store.refuse_kind = cache::CacheError::Kind::kReadOnly;
  ASSERT_TRUE(source.list(commit, "other"));
  store.lose_everything();
  EXPECT_TRUE(source.list(commit, "other"));
  store.fail_reads = true;
  EXPECT_TRUE(source.list(commit, "other"));  // a failing store is a miss
}

TEST_F(ListingSourceTest, AHugeSubtreeIsListedOneFolderAtATime) {
  hub.too_many = true;
  auto root = source.list(commit, "");
  ASSERT_TRUE(root);
  EXPECT_EQ(paths(*root), (std::vector<std::string>{"README.md", "other", "pkg"}));
  EXPECT_EQ(hub.calls, 2);  // the recursive attempt, then the folder alone
  EXPECT_EQ(store.listings.count({"https://hub.example", "org/repo", commit, "pkg", "public"}), 0u);
}

// A cache others can write (group-shared, a read-only tier someone else made) holds listings
// that are hints: the Hub's answer decides each file's hash, one subtree call still serves
// every folder in it, and the cached copy is used only when the Hub cannot be reached.
std::string sha_of(const std::vector<RemoteEntry>& entries, const std::string& path) {
  for (const auto& e : entries) {
    if (e.path == path) return e.lfs_sha256;
  }
  return "missing";
}

TEST_F(ListingSourceTest, AListingOthersCouldHaveWrittenIsAskedOfTheHub) {
  ASSERT_TRUE(source.list(commit, ""));
  // Someone who can write the cache gives pkg/a.whl another hash.
  auto& planted = store.listings[{"https://hub.example", "org/repo", commit, "pkg", "public"}];
  for (auto& e : planted) {
    if (e.path == "pkg/a.whl") e.lfs_sha256 = std::string(64, 'e');
  }
  CachedListingSource trusting(hub, store, believing, "https://hub.example", "org/repo", 5s);
  auto believed = trusting.list(commit, "pkg");
  ASSERT_TRUE(believed);
  EXPECT_EQ(sha_of(*believed, "pkg/a.whl"), std::string(64, 'e'));  // the private cache's rule

  hub.calls = 0;
  CachedListingSource wary(hub, store, wary_gate, "https://hub.example", "org/repo", 5s);
  auto root = wary.list(commit, "");
  ASSERT_TRUE(root);
  auto pkg = wary.list(commit, "pkg");
  ASSERT_TRUE(pkg);
  EXPECT_EQ(sha_of(*pkg, "pkg/a.whl"), "");
  EXPECT_TRUE(wary.list(commit, "pkg/sub"));
  EXPECT_EQ(hub.calls, 1);  // the root's subtree call served its folders too
  // The Hub's listing went back into the cache in place of the planted one.
  EXPECT_EQ(sha_of(store.listings[{"https://hub.example", "org/repo", commit, "pkg", "public"}],
                   "pkg/a.whl"),
            "");

  // With the Hub out of reach, the cached copy is all there is (offline trusts the writers).
  for (auto& e : planted) {
    if (e.path == "pkg/a.whl") e.lfs_sha256 = std::string(64, 'e');
  }
  hub.down = true;
  CachedListingSource cut_off(hub, store, wary_gate, "https://hub.example", "org/repo", 5s);
  auto fallback = cut_off.list(commit, "pkg");
  ASSERT_TRUE(fallback);
  EXPECT_EQ(sha_of(*fallback, "pkg/a.whl"), std::string(64, 'e'));
  // Nothing cached and no Hub: an error, as before.
  auto none = cut_off.list(std::string(40, 'b'), "pkg");
  ASSERT_FALSE(none);
}

}  // namespace
}  // namespace whfs
