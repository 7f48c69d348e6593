// Unit tests of the read path's parts, each alone: the serving gate's verdicts, the verifier's
// retry-then-quarantine, the memory budget, the downloads' single flight and the claims.

#include <gtest/gtest.h>

#include <thread>

#include "fs/reader/claims.h"
#include "fs/reader/downloads.h"
#include "fs/reader/memory_contents.h"
#include "fs/reader/serving_gate.h"
#include "fs/reader/verifier.h"
#include "tests/unit/reader/fetcher_fixture.h"

namespace whfs::reader::testing_fetcher {
namespace {

using Mode = cache::BlockStore::ReadMode;

class PartsTest : public FetcherTest {};

// ---- ServingGate -----------------------------------------------------------------------

TEST_F(PartsTest, GateVerifiedServingServesOnlyWhatThisProcessVerified) {
  ServingGate gate(testing::public_scope(), {}, config(Serving::kVerified), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  EXPECT_EQ(gate.verdict(content.id).kind, Verdict::Kind::kFetchFirst);
  EXPECT_TRUE(gate.must_verify(content.id, /*verified=*/true));  // another process's record
  EXPECT_TRUE(gate.must_verify(content.id, false));
  gate.trust(content.id);
  const Verdict v = gate.verdict(content.id);
  EXPECT_EQ(v.kind, Verdict::Kind::kFromCache);
  EXPECT_EQ(v.mode, Mode::kVerified);
  EXPECT_FALSE(gate.must_verify(content.id, true));
  EXPECT_TRUE(gate.must_verify(content.id, false));  // the cache lost its record: hash again
  gate.distrust(content.id);
  EXPECT_EQ(gate.verdict(content.id).kind, Verdict::Kind::kFetchFirst);
}

TEST_F(PartsTest, GateServesNothingOfAContentThisProcessWasNotAdmittedTo) {
  // Another audience's content (cache/audience.h): whatever the cache says of it, trusted or
  // streamed, a read fetches first (which admits it, or fails).
  for (const auto serving : {Serving::kVerified, Serving::kStreaming}) {
    ServingGate gate(testing::public_scope(), believed(), config(serving), stats);
    gate.trust(content.id);
    EXPECT_EQ(gate.verdict(content.id).kind, Verdict::Kind::kFetchFirst);
    EXPECT_FALSE(gate.admitted(content.id));
    EXPECT_TRUE(gate.admit(content.id));
    EXPECT_FALSE(gate.admit(content.id));  // once
    EXPECT_EQ(gate.verdict(content.id).kind, Verdict::Kind::kFromCache);
  }
}

TEST_F(PartsTest, GateTrustedCacheServesItsRecord) {
  ServingGate gate(testing::public_scope(), believed(), config(Serving::kVerified), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  EXPECT_EQ(gate.verdict(content.id).kind, Verdict::Kind::kFromCache);
  EXPECT_FALSE(gate.must_verify(content.id, true));
  EXPECT_TRUE(gate.must_verify(content.id, false));
}

TEST_F(PartsTest, GateStopsStreamingASuspectContentUntilItMatches) {
  ServingGate gate(testing::public_scope(), {}, config(Serving::kStreaming), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  Verdict v = gate.verdict(content.id);
  EXPECT_EQ(v.kind, Verdict::Kind::kFromCache);
  EXPECT_EQ(v.mode, Mode::kPartial);
  EXPECT_FALSE(gate.must_verify(content.id, true));  // streaming takes the cache's record
  gate.suspect(content.id);
  EXPECT_FALSE(gate.streams(content.id));
  EXPECT_EQ(gate.verdict(content.id).kind, Verdict::Kind::kFetchFirst);
  gate.trust(content.id);  // it matched since: no longer suspect
  v = gate.verdict(content.id);
  EXPECT_EQ(v.kind, Verdict::Kind::kFromCache);
  EXPECT_EQ(v.mode, Mode::kPartial);
}

TEST_F(PartsTest, GateSkipsBlockChecksumsOnlyForWhatThisProcessHashedJustNow) {
  ServingGate gate(testing::public_scope(), {}, config(Serving::kVerified), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  gate.trust(content.id);
  EXPECT_EQ(gate.verdict(content.id).mode, Mode::kVerified);  // trusted, not hashed here
  gate.hashed_here(content.id);
  EXPECT_EQ(gate.verdict(content.id).mode, Mode::kHashedHere);
  gate.distrust(content.id);  // its blocks change: checksums again, once trusted again
  gate.trust(content.id);
  EXPECT_EQ(gate.verdict(content.id).mode, Mode::kVerified);
  gate.hashed_here(content.id);
  gate.suspect(content.id);
  gate.trust(content.id);
  EXPECT_EQ(gate.verdict(content.id).mode, Mode::kVerified);
  // A trusted cache's record: served with its checksums unless hashed here.
  ServingGate trusting(testing::public_scope(), believed(), config(Serving::kVerified), stats);
  trusting.admit(content.id);
  EXPECT_EQ(trusting.verdict(content.id).mode, Mode::kVerified);
  trusting.hashed_here(content.id);
  EXPECT_EQ(trusting.verdict(content.id).mode, Mode::kHashedHere);
}

TEST_F(PartsTest, GatePeeksASharedCacheOnlyForVerifiedContents) {
  ServingGate gate(testing::public_scope(), {}, config(), stats);  // a cache others can write
  gate.admit(content.id);  // (a content this process may read at all)
  EXPECT_FALSE(gate.may_peek_cache(content.id));
  gate.trust(content.id);
  EXPECT_TRUE(gate.may_peek_cache(content.id));
  EXPECT_TRUE(
      ServingGate(testing::public_scope(), believed(), config(), stats).may_peek_cache(content.id));
}

TEST_F(PartsTest, GateFailsFastAfterQuarantineAndRecentFailures) {
  FetcherConfig c = config();
  c.corrupt_quarantine = 60s;
  c.failure_memo = 60s;
  ServingGate gate(testing::public_scope(), {}, c, stats);
  gate.admit(content.id);  // (a content this process may read at all)
  EXPECT_FALSE(gate.blocked(content.id, "p"));
  gate.quarantine(content.id);
  auto q = gate.blocked(content.id, "p");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->kind, FsErrorKind::kCorrupt);

  const auto other = content_of("other bytes").id;
  gate.remember_failure(other, ReadError{FsErrorKind::kTimedOut, "p: no progress"});
  auto f = gate.blocked(other, "p");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, FsErrorKind::kTimedOut);
  EXPECT_NE(f->message.find("failed moments ago"), std::string::npos);
  // A reader that went away is no failure of the content.
  const auto third = content_of("third").id;
  gate.remember_failure(third, cancelled_error("gone"));
  EXPECT_FALSE(gate.blocked(third, "p"));
  EXPECT_EQ(stats.fetch().failed_fast, 2u);
}

TEST_F(PartsTest, GateForgetsAFailureWhenItsTimeIsUp) {
  FetcherConfig c = config();
  c.failure_memo = 0s;  // off
  ServingGate gate(testing::public_scope(), {}, c, stats);
  gate.admit(content.id);  // (a content this process may read at all)
  gate.remember_failure(content.id, ReadError{FsErrorKind::kIo, "down"});
  EXPECT_FALSE(gate.blocked(content.id, "p"));
}

// ---- Verifier ----------------------------------------------------------------------------

TEST_F(PartsTest, VerifierRefetchesOnceThenQuarantines) {
  ServingGate gate(testing::public_scope(), {}, config(), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  Verifier v(store, gate, config(), stats);
  int corrupt_calls = 0;
  gate.set_corrupt_listener([&](const cache::ContentId&) { corrupt_calls++; });
  std::string copy = bytes;
  copy[5] ^= 1;
  int refetches = 0;
  auto r =
      v.verify_buffer(content, std::as_bytes(std::span(copy)), [&]() -> Expected<void, ReadError> {
        refetches++;
        return {};  // "fetched again", still wrong
      });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kCorrupt);
  EXPECT_TRUE(r.error().logged);
  EXPECT_EQ(refetches, 1);
  EXPECT_EQ(corrupt_calls, 2);
  EXPECT_FALSE(gate.streams(content.id));
  EXPECT_TRUE(gate.blocked(content.id, "p"));  // quarantined
  EXPECT_EQ(stats.fetch().corrupt, 2u);
}

TEST_F(PartsTest, VerifierAcceptsARefetchThatMatches) {
  ServingGate gate(testing::public_scope(), {}, config(), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  Verifier v(store, gate, config(), stats);
  std::string copy = bytes;
  copy[5] ^= 1;
  auto r =
      v.verify_buffer(content, std::as_bytes(std::span(copy)), [&]() -> Expected<void, ReadError> {
        copy = bytes;
        return {};
      });
  EXPECT_TRUE(r);
  EXPECT_FALSE(gate.blocked(content.id, "p"));
}

TEST_F(PartsTest, VerifierTakesATrustedRecordWithoutCallingItHashedHere) {
  FetcherConfig c = config();
  ServingGate gate(testing::public_scope(), believed(), c, stats);
  gate.admit(content.id);  // (a content this process may read at all)
  Verifier v(store, gate, c, stats);
  store.plant(content.id, bytes);  // recorded verified (by this user, earlier)
  ASSERT_TRUE(
      v.verify_cached(content, /*recorded=*/true, [] { return Expected<void, ReadError>{}; }));
  EXPECT_EQ(store.hashed.load(), 0);
  EXPECT_EQ(gate.verdict(content.id).mode, Mode::kVerified);  // its checksums are checked
}

TEST_F(PartsTest, VerifierHashesTheCacheCopyHereAndTrustsIt) {
  ServingGate gate(testing::public_scope(), {}, config(), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  Verifier v(store, gate, config(), stats);
  store.plant(content.id, bytes);  // recorded verified by "another process"
  auto r = v.verify_cached(content, /*recorded=*/true, [&]() -> Expected<void, ReadError> {
    ADD_FAILURE() << "no refetch for matching bytes";
    return {};
  });
  EXPECT_TRUE(r);
  EXPECT_EQ(store.hashed.load(), 1);  // hashed by this process despite the record
  EXPECT_TRUE(gate.serves_verified(content.id));
  EXPECT_EQ(gate.verdict(content.id).mode, Mode::kHashedHere);  // just hashed: no checksums
  EXPECT_EQ(stats.fetch().rechecks, 1u);
}

TEST_F(PartsTest, VerifierPassesARefetchFailureOnAsIs) {
  ServingGate gate(testing::public_scope(), {}, config(), stats);
  gate.admit(content.id);  // (a content this process may read at all)
  Verifier v(store, gate, config(), stats);
  store.plant(content.id, bytes);
  auto r = v.verify_cached(content, /*recorded=*/true, [&]() -> Expected<void, ReadError> {
    return unexpected(ReadError{FsErrorKind::kTimedOut, "refetch timed out"});
  });
  EXPECT_TRUE(r);  // (it matched: the refetch never ran)
  store.plant(content.id, bytes.substr(0, bytes.size() - 1) + "!");  // a planted wrong byte
  gate.distrust(content.id);  // (its blocks changed: what this process verified no longer holds)
  r = v.verify_cached(content, /*recorded=*/true, [&]() -> Expected<void, ReadError> {
    return unexpected(ReadError{FsErrorKind::kTimedOut, "refetch timed out"});
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kTimedOut);
}

// ---- MemoryContents ----------------------------------------------------------------------

std::shared_ptr<Downloads::BufferFetch> one_piece_plan(const FileContent& c) {
  auto m = std::make_shared<Downloads::BufferFetch>(c);
  m->pieces.push_back(nullptr);  // stands for one flight
  return m;
}

TEST_F(PartsTest, MemoryJoinsOneFetchAndKeepsItsResult) {
  MemoryContents mem(1 << 20, stats);
  auto first = mem.join_or_plan(content, "why", [&] { return one_piece_plan(content); });
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->mine);
  auto second = mem.join_or_plan(content, "why", [&] {
    ADD_FAILURE() << "a second fetch of the same content";
    return one_piece_plan(content);
  });
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->mine);
  EXPECT_EQ(second->fetch, first->fetch);
  EXPECT_EQ(mem.hit(content.id), nullptr);
  auto result = std::make_shared<MemoryContent>();
  result->size = content.size;
  mem.finish(*first->fetch, result);
  EXPECT_EQ(mem.hit(content.id), result);
  EXPECT_TRUE(first->fetch->pieces.empty());  // the cycle is broken
  EXPECT_EQ(stats.fetch().in_memory, 1u);
  EXPECT_EQ(stats.fetch().waits_joined, 1u);
}

TEST_F(PartsTest, MemoryForgetsTheLeastRecentlyUsedForRoom) {
  const FileContent a = content_of(make_bytes(400));
  const FileContent b = content_of(make_bytes(401));
  const FileContent c = content_of(make_bytes(402));
  MemoryContents mem(1000, stats);
  for (const FileContent* x : {&a, &b}) {
    auto j = mem.join_or_plan(*x, "why", [&] { return one_piece_plan(*x); });
    ASSERT_TRUE(j);
    auto r = std::make_shared<MemoryContent>();
    r->size = x->size;
    mem.finish(*j->fetch, r);
  }
  ASSERT_NE(mem.hit(a.id), nullptr);  // a is now the most recently used
  auto j = mem.join_or_plan(c, "why", [&] { return one_piece_plan(c); });
  ASSERT_TRUE(j);
  EXPECT_EQ(mem.hit(b.id), nullptr);  // b made room
  EXPECT_NE(mem.hit(a.id), nullptr);
  // c's bytes stay reserved while it is fetched: d's room comes from a.
  const FileContent d = content_of(make_bytes(300));
  EXPECT_TRUE(mem.join_or_plan(d, "why", [&] { return one_piece_plan(d); }));
  EXPECT_EQ(mem.hit(a.id), nullptr);
  mem.finish(*j->fetch, nullptr);  // c failed: its bytes come back
  const FileContent e = content_of(make_bytes(600));
  EXPECT_TRUE(mem.join_or_plan(e, "why", [&] { return one_piece_plan(e); }));
}

TEST_F(PartsTest, MemoryRefusesWhatCannotFit) {
  MemoryContents mem(100, stats);
  auto r = mem.join_or_plan(content, "the cache could not keep it",
                            [&] { return one_piece_plan(content); });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kIo);
  EXPECT_NE(r.error().message.find("larger than the memory"), std::string::npos);
  EXPECT_NE(r.error().message.find("the cache could not keep it"), std::string::npos);
}

// ---- Downloads ---------------------------------------------------------------------------

TEST_F(PartsTest, DownloadsJoinABlockInFlightAndCallOnCompleteOnce) {
  std::atomic<int> completed{0};
  Downloads d(store, hub, config(), stats, [&](const FileContent&, const cache::ContentState& s) {
    EXPECT_TRUE(s.complete());
    completed++;
    return Expected<void, ReadError>{};
  });
  hub.hold();
  const std::uint32_t total = block_count(content.size, kBlock);
  std::vector<std::uint32_t> all(total);
  for (std::uint32_t i = 0; i < total; ++i) all[i] = i;
  Expected<Downloads::Stored, ReadError> r1 = Downloads::Stored::kNotKept, r2 = r1;
  std::thread t1([&] { r1 = d.fetch_blocks(content, all, patience(), std::nullopt); });
  ASSERT_TRUE(eventually([&] { return calls() == 3; }));  // 11 blocks in requests of 4
  std::thread t2([&] { r2 = d.fetch_blocks(content, all, patience(), std::nullopt); });
  ASSERT_TRUE(eventually([&] { return stats.fetch().waits_joined == 3; }));
  hub.release();
  t1.join();
  t2.join();
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(*r1, Downloads::Stored::kCached);
  EXPECT_EQ(calls(), 3);           // the second reader joined the flights
  EXPECT_EQ(completed.load(), 1);  // the put that completed the content
}

TEST_F(PartsTest, DownloadsTimeOutWithoutProgressAndAbandonTheFlight) {
  Downloads d(store, hub, config(), stats, [](const FileContent&, const cache::ContentState&) {
    return Expected<void, ReadError>{};
  });
  hub.hold();
  auto r = d.fetch_blocks(content, {0}, patience(50ms), std::nullopt);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kTimedOut);
  EXPECT_TRUE(eventually([&] { return hub.abandoned.load() == 1; }));
  hub.release();
}

TEST_F(PartsTest, DownloadsMapAHubFailureForTheFilesBytes) {
  Downloads d(store, hub, config(), stats, [](const FileContent&, const cache::ContentState&) {
    return Expected<void, ReadError>{};
  });
  hub.fail = true;
  std::string out(10, '\0');
  auto r =
      d.get_range(content, 0, std::as_writable_bytes(std::span(out)), Clock::now() + 5s, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kIo);
  EXPECT_TRUE(r.error().logged);
  EXPECT_EQ(stats.fetch().errors, 1u);
}

// ---- Claims ------------------------------------------------------------------------------

// What the fetcher gives Claims of the cache.
Claims::Cache claims_cache(cache::BlockStore& store) {
  return Claims::Cache{[&store](const cache::ContentId& id) { return store.claim_download(id); },
                       [&store](const cache::ContentId& id) { return store.content_state(id); }};
}

TEST_F(PartsTest, ClaimsShareOneClaimAmongThisProcesssReaders) {
  Claims claims(claims_cache(store), 10s, stats);
  auto a = claims.claim_or_wait(content, patience());
  auto b = claims.claim_or_wait(content, patience());
  ASSERT_TRUE(a && b);
  ASSERT_NE(a->claim, nullptr);
  EXPECT_EQ(a->claim, b->claim);
}

TEST_F(PartsTest, ClaimsWaitForAnotherProcessThenSeeItFinish) {
  Claims claims(claims_cache(store), 10s, stats);
  store.claimed_elsewhere = true;
  std::thread other([&] {
    std::this_thread::sleep_for(30ms);
    store.plant(content.id, bytes);  // the other process's download, done
  });
  auto r = claims.claim_or_wait(content, patience());
  other.join();
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->finished);
  EXPECT_EQ(stats.fetch().shared_waits, 1u);
  EXPECT_EQ(stats.fetch().takeovers, 0u);
}

TEST_F(PartsTest, ClaimsTakeOverAStalledDownload) {
  Claims claims(claims_cache(store), 0s, stats);
  store.claimed_elsewhere = true;
  auto r = claims.claim_or_wait(content, patience());
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->finished);
  EXPECT_EQ(r->claim, nullptr);
  EXPECT_EQ(stats.fetch().takeovers, 1u);
}

TEST_F(PartsTest, ClaimsWaitEndsWhenTheReaderGoesAway) {
  Claims claims(claims_cache(store), 60s, stats);
  store.claimed_elsewhere = true;
  CancelFlag cancel;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    cancel.cancel();
  });
  auto r = claims.claim_or_wait(content, patience(5000ms, &cancel));
  t.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kInterrupted);
}

}  // namespace
}  // namespace whfs::reader::testing_fetcher
