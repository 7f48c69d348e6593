// Who may read what a shared cache holds (cache/audience.h, fetcher.h): a content another
// audience fetched is served only after a grant of this process's audiences or a proof.
#include <gtest/gtest.h>

#include "fs/reader/fetcher.h"
#include "fs/reader/reader.h"
#include "tests/unit/reader/fetcher_fixture.h"

namespace whfs::reader {
namespace {

using namespace testing_fetcher;

const std::string kOther = cache::credential_audience("https://hub", "hf_tenant_a");

class AccessTest : public FetcherTest {
 protected:
  // Tenant B: a mount with its own token.
  const cache::AccessScope tenant_b{cache::credential_audience("https://hub", "hf_tenant_b")};

  bool granted_to(const cache::AccessScope& s) {
    return store.granted(content.id, s.readable()).value();
  }
};

TEST_F(AccessTest, AContentOfAnotherAudienceIsServedAfterAProofWithThisCredential) {
  store.plant(content.id, bytes, kOther);
  TestReader r_parts(store, hub, tenant_b, ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 0, 100), bytes.substr(0, 100));
  ASSERT_EQ(calls(), 1);  // one small ranged GET, not the file
  {
    std::lock_guard lock(hub.mu_);
    EXPECT_LE(hub.ranges[0].second, Fetcher::kProofBytes);
  }
  EXPECT_TRUE(granted_to(tenant_b));  // recorded: the next mount of B needs no proof
  EXPECT_EQ(read(r, *f, 5000, 100), bytes.substr(5000, 100));
  EXPECT_EQ(calls(), 1);
  r.release(*f);
  TestReader again_parts(store, hub, tenant_b, ReaderConfig{config(), {}});
  Reader& again = again_parts.reader;
  auto g = again.open(content, false);
  EXPECT_EQ(read(again, *g, 0, 10), bytes.substr(0, 10));
  EXPECT_EQ(calls(), 1);
  again.release(*g);
}

TEST_F(AccessTest, ACredentialTheHubRefusesReadsNothingOfWhatAnotherFetched) {
  // Tenant A fetched a gated (or private) file; B's token has no access: every read fails
  // (the Hub's answer), in both serving modes, and no grant is recorded.
  store.plant(content.id, bytes, kOther);
  hub.deny = true;
  for (const auto serving : {Serving::kVerified, Serving::kStreaming}) {
    FetcherConfig c = config(serving);
    c.failure_memo = 0s;
    // (even where the cache is taken at its word)
    TestReader r_parts(store, hub, tenant_b, ReaderConfig{c, {}}, believed());
    Reader& r = r_parts.reader;
    auto f = r.open(content, false);
    for (const std::uint64_t off : {std::uint64_t{0}, std::uint64_t{5000}}) {
      const std::string got = read(r, *f, off, 100);
      EXPECT_TRUE(got.starts_with("ERROR:")) << got;
      EXPECT_EQ(got.find(bytes.substr(off, 20)), std::string::npos);
    }
    r.release(*f);
  }
  EXPECT_FALSE(granted_to(tenant_b));
  // The wheel-metadata path (peek) is refused too.
  TestReader r_parts(store, hub, tenant_b, ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto peeked = r.peek(content, 0, 100, patience());
  EXPECT_FALSE(peeked);
}

TEST_F(AccessTest, AnEndpointThatDoesNotHoldTheContentCannotProveIt) {
  // A listing that names a content this endpoint does not have (a hostile endpoint that
  // learned its sha256): its bytes are not the cache's, so nothing is served.
  store.plant(content.id, bytes, kOther);
  MemoryHub liar(make_bytes(bytes.size() + 7).substr(7));
  FetcherConfig c = config();
  c.failure_memo = 0s;
  TestReader r_parts(store, liar, tenant_b, ReaderConfig{c, {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  const std::string got = read(r, *f, 0, 100);
  EXPECT_TRUE(got.starts_with("ERROR:")) << got;
  EXPECT_NE(got.find("differ"), std::string::npos) << got;
  EXPECT_FALSE(granted_to(tenant_b));
  r.release(*f);
}

TEST_F(AccessTest, AStreamingReaderProvesBeforeServingAnotherAudiencesBlocks) {
  // Part of the file is stored by another audience: streaming serves blocks as they are, but
  // not those before this process may read them.
  ASSERT_TRUE(store.put_blocks(content.id, content.size, 0,
                               std::as_bytes(std::span(bytes)).subspan(0, 3 * kBlock)));
  ASSERT_TRUE(store.grant(content.id, cache::Audience(kOther)));
  hub.deny = true;
  FetcherConfig c = config(Serving::kStreaming);
  c.failure_memo = 0s;
  TestReader r_parts(store, hub, tenant_b, ReaderConfig{c, {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_TRUE(read(r, *f, 0, 100).starts_with("ERROR:"));
  hub.deny = false;
  EXPECT_EQ(read(r, *f, 0, 100), bytes.substr(0, 100));
  EXPECT_TRUE(granted_to(tenant_b));
  r.release(*f);
}

TEST_F(AccessTest, ADownloadOfItsOwnGrantsItsAudienceAndAPublicRepositoryEverybody) {
  // B downloads a cold file of a private repository: granted to B alone. Of a public one (the
  // Hub said so at the revision): to everybody, so a mount without a token needs no proof.
  {
    TestReader r_parts(store, hub, tenant_b, ReaderConfig{config(), {}});
    Reader& r = r_parts.reader;
    auto f = r.open(content, false);
    EXPECT_EQ(read(r, *f, 0, 100), bytes.substr(0, 100));
    r.release(*f);
  }
  EXPECT_TRUE(granted_to(tenant_b));
  EXPECT_FALSE(granted_to(testing::public_scope()));
  const int downloaded = calls();

  const std::string other = make_bytes(3 * kBlock);
  const FileContent pub = content_of(other);
  MemoryHub pub_hub(other);
  cache::AccessScope b_on_public(tenant_b.own());
  b_on_public.set_repo_public(true);
  {
    TestReader r_parts(store, pub_hub, b_on_public, ReaderConfig{config(), {}});
    Reader& r = r_parts.reader;
    auto f = r.open(pub, false);
    EXPECT_EQ(read(r, *f, 0, 100), other.substr(0, 100));
    r.release(*f);
  }
  EXPECT_TRUE(store.granted(pub.id, testing::public_scope().readable()).value());
  const int pub_calls = pub_hub.calls.load();
  TestReader anyone_parts(store, pub_hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& anyone = anyone_parts.reader;
  auto g = anyone.open(pub, false);
  EXPECT_EQ(read(anyone, *g, 100, 100), other.substr(100, 100));
  EXPECT_EQ(pub_hub.calls.load(), pub_calls);  // no request at all
  anyone.release(*g);
  EXPECT_EQ(calls(), downloaded);
}

}  // namespace
}  // namespace whfs::reader
