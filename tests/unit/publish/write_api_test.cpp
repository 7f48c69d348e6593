// The write API's bodies and the parsing of its answers (hub-write-api.md), without a server.
#include "fs/publish/write_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fs/common/base64.h"

namespace whfs::publish {
namespace {

using nlohmann::json;

const std::string kOid = std::string(64, 'a');

std::vector<json> lines(const std::string& ndjson) {
  std::vector<json> out;
  std::size_t at = 0;
  while (at < ndjson.size()) {
    const auto nl = ndjson.find('\n', at);
    EXPECT_NE(nl, std::string::npos) << "every line ends with a newline";
    out.push_back(json::parse(ndjson.substr(at, nl - at)));
    at = nl + 1;
  }
  return out;
}

TEST(WriteApi, PreuploadSendsPathSizeAndSample) {
  const json body = json::parse(preupload_body({{"p/x.whl", 1234, std::string("PK\3\4\0\0", 6)}}));
  EXPECT_EQ(body, json::parse(R"({"files":[{"path":"p/x.whl","size":1234,"sample":"UEsDBAAA"}]})"));
  auto a = parse_preupload(
      R"({"files":[{"path":"p/x.whl","uploadMode":"lfs","shouldIgnore":false,"oid":"abc"},
                   {"path":"p/y.txt","uploadMode":"regular","shouldIgnore":true}]})");
  ASSERT_TRUE(a) << a.error();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_TRUE((*a)[0].lfs);
  EXPECT_EQ((*a)[0].oid, "abc");
  EXPECT_FALSE((*a)[1].lfs);
  EXPECT_TRUE((*a)[1].should_ignore);
  EXPECT_EQ((*a)[1].oid, "");
  EXPECT_FALSE(parse_preupload(R"({"files":[{"path":"p","uploadMode":"xet"}]})"));
  EXPECT_FALSE(parse_preupload(R"({"files":[{"uploadMode":"lfs"}]})"));
  EXPECT_FALSE(parse_preupload("[]"));
  EXPECT_FALSE(parse_preupload("not json"));
}

TEST(WriteApi, BatchAsksForBasicAndMultipart) {
  const json body = json::parse(batch_body("main", {{kOid, 10}}));
  EXPECT_EQ(body["operation"], "upload");
  EXPECT_EQ(body["transfers"], json::parse(R"(["basic","multipart"])"));
  EXPECT_EQ(body["hash_algo"], "sha256");
  EXPECT_EQ(body["ref"], json::parse(R"({"name":"main"})"));
  EXPECT_EQ(body["objects"], json::parse(R"([{"oid":")" + kOid + R"(","size":10}])"));
}

TEST(WriteApi, BatchAnswersBasicMultipartAndStored) {
  const std::string b = std::string(64, 'b');
  const std::string c = std::string(64, 'c');
  const std::string answer = R"({"transfer":"basic","objects":[
      {"oid":")" + kOid + R"(","size":10},
      {"oid":")" + b + R"(","size":20,"actions":{"upload":{"href":"https://s3/put"},
                                                 "verify":{"href":"https://hub/verify"}}},
      {"oid":")" + c + R"(","size":25,"actions":{"upload":{"href":"https://hub/complete",
          "header":{"chunk_size":"10","00003":"https://s3/3","00001":"https://s3/1",
                    "00002":"https://s3/2"}}}}]})";
  auto r = parse_batch(answer, {{c, 25}, {kOid, 10}, {b, 20}});
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->size(), 3u);  // in the order asked
  EXPECT_EQ((*r)[0].chunk_size, 10u);
  EXPECT_EQ((*r)[0].parts,
            (std::vector<std::string>{"https://s3/1", "https://s3/2", "https://s3/3"}));
  EXPECT_EQ((*r)[0].href, "https://hub/complete");
  EXPECT_TRUE((*r)[1].stored);
  EXPECT_FALSE((*r)[2].stored);
  EXPECT_EQ((*r)[2].chunk_size, 0u);
  EXPECT_EQ((*r)[2].href, "https://s3/put");
  EXPECT_EQ((*r)[2].verify_href, "https://hub/verify");
}

TEST(WriteApi, BadBatchAnswersAreErrors) {
  auto err = [](const std::string& objects, std::uint64_t size = 25) {
    auto r = parse_batch(R"({"objects":[)" + objects + "]}", {{kOid, size}});
    EXPECT_FALSE(r) << objects;
    return r ? "" : r.error();
  };
  const std::string o = R"({"oid":")" + kOid + R"(","size":25)";
  EXPECT_EQ(err(o + R"(,"error":{"code":422,"message":"Invalid object"}})"),
            "the Hub refused object " + kOid + ": Invalid object (code 422)");
  EXPECT_EQ(err(o + R"(,"actions":{"upload":{"href":"h","header":{"chunk_size":"10",
                "00001":"u1","00002":"u2"}}}})"),
            "object " + kOid + ": 2 part URLs for 3 parts");
  EXPECT_EQ(err(o + R"(,"actions":{"upload":{"href":"h","header":{"chunk_size":"0"}}}})"),
            "object " + kOid + ": chunk_size is not a positive integer");
  EXPECT_EQ(err(o + R"(,"actions":{"verify":{"href":"v"}}})"),
            "object " + kOid + " has actions but no upload href");
  EXPECT_EQ(err(o + "}", 26), "LFS batch answer gives object " + kOid + " the size 25, not 26");
  EXPECT_EQ(err("", 25), "LFS batch answer lacks object " + kOid);
  EXPECT_EQ(err(R"({"oid":"zzz"})"), "LFS batch answer has an object not asked for: \"zzz\"");
}

TEST(WriteApi, CompletionAndVerifyBodies) {
  EXPECT_EQ(
      json::parse(completion_body(kOid, {"\"e1\"", "\"e2\""})),
      json::parse(
          R"({"oid":")" + kOid +
          R"(","parts":[{"partNumber":1,"etag":"\"e1\""},{"partNumber":2,"etag":"\"e2\""}]})"));
  EXPECT_EQ(json::parse(verify_body({kOid, 7})),
            json::parse(R"({"oid":")" + kOid + R"(","size":7})"));
}

TEST(WriteApi, CommitIsOneHeaderThenOneLinePerFile) {
  const std::string parent(40, 'f');
  const auto l = lines(
      commit_payload({"Publish x", "why\nand how", parent},
                     {{"p/x.whl", 1234, kOid, true, ""},
                      {"p/notes.txt", 5, std::string(64, 'b'), false, std::string("hi\0!\n", 5)}}));
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0], json::parse(R"({"key":"header","value":{"summary":"Publish x",
                                 "description":"why\nand how","parentCommit":")" +
                              parent + R"("}})"));
  EXPECT_EQ(l[1], json::parse(R"({"key":"lfsFile","value":{"path":"p/x.whl","algo":"sha256",
                                 "oid":")" +
                              kOid + R"(","size":1234}})"));
  EXPECT_EQ(l[2]["key"], "file");
  EXPECT_EQ(l[2]["value"]["encoding"], "base64");
  EXPECT_EQ(l[2]["value"]["content"], base64(std::string_view("hi\0!\n", 5)));
  // Without a parent, the header has none.
  EXPECT_FALSE(lines(commit_payload({"s", "", ""}, {}))[0]["value"].contains("parentCommit"));
}

TEST(WriteApi, CommitAnswer) {
  const std::string sha(40, 'a');
  auto a = parse_commit(R"({"success":true,"commitOid":")" + sha + R"(","commitUrl":"u"})");
  ASSERT_TRUE(a) << a.error();
  EXPECT_EQ(a->commit, sha);
  EXPECT_EQ(a->url, "u");
  EXPECT_FALSE(parse_commit(R"({"commitOid":"xyz"})"));
  EXPECT_FALSE(parse_commit("<html>"));
}

}  // namespace
}  // namespace whfs::publish
