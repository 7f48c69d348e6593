#include "fs/publish/write_api.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "fs/common/base64.h"
#include "fs/common/hash.h"

namespace whfs::publish {
namespace {

using nlohmann::json;

Expected<json, std::string> parse_object(const std::string& body, const char* what) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return unexpected(std::string(what) + " answer is not a JSON object");
  }
  return j;
}

// Typed access that never throws: a missing key or another type reads as absent.
const json* member(const json& o, const char* key) {
  const auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}
std::optional<std::string> text(const json& o, const char* key) {
  const json* v = member(o, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}
bool flag(const json& o, const char* key) {
  const json* v = member(o, key);
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The multipart part URLs: the all-digit keys of the header, in their numeric order.
Expected<void, std::string> read_parts(const json& header, BatchAnswer& a) {
  const json* cs = member(header, "chunk_size");
  const std::string chunk = cs == nullptr              ? ""
                            : cs->is_string()          ? cs->get<std::string>()
                            : cs->is_number_unsigned() ? std::to_string(cs->get<std::uint64_t>())
                                                       : "";
  if (!all_digits(chunk) || chunk.size() > 15 || std::stoull(chunk) == 0) {
    return unexpected("object " + a.oid + ": chunk_size is not a positive integer");
  }
  a.chunk_size = std::stoull(chunk);
  std::map<std::uint64_t, std::string> parts;
  for (const auto& [key, value] : header.items()) {
    if (!all_digits(key) || key.size() > 9) continue;
    if (!value.is_string()) return unexpected("object " + a.oid + ": part " + key + " has no URL");
    parts[std::stoull(key)] = value.get<std::string>();
  }
  const std::uint64_t want = (a.size + a.chunk_size - 1) / a.chunk_size;
  if (parts.size() != want || (!parts.empty() && parts.rbegin()->first != want)) {
    return unexpected("object " + a.oid + ": " + std::to_string(parts.size()) + " part URLs for " +
                      std::to_string(want) + " parts");
  }
  for (auto& [n, url] : parts) a.parts.push_back(std::move(url));
  return {};
}

// The actions of one object that must be uploaded.
Expected<void, std::string> read_actions(const json& actions, BatchAnswer& a) {
  const json* upload = member(actions, "upload");
  const auto href = upload != nullptr ? text(*upload, "href") : std::nullopt;
  if (!href) return unexpected("object " + a.oid + " has actions but no upload href");
  a.href = *href;
  if (const json* verify = member(actions, "verify")) {
    a.verify_href = text(*verify, "href").value_or("");
  }
  const json* header = member(*upload, "header");
  if (header == nullptr) return {};
  if (!header->is_object()) {
    return unexpected("object " + a.oid + ": upload header is not an object");
  }
  // The presence of chunk_size is what selects the multipart transfer.
  return header->contains("chunk_size") ? read_parts(*header, a) : Expected<void, std::string>{};
}

}  // namespace

std::string preupload_body(const std::vector<PreuploadFile>& files) {
  json list = json::array();
  for (const auto& f : files) {
    list.push_back({{"path", f.path}, {"size", f.size}, {"sample", base64(f.sample)}});
  }
  return json{{"files", list}}.dump();
}

Expected<std::vector<PreuploadAnswer>, std::string> parse_preupload(const std::string& body) {
  auto j = parse_object(body, "preupload");
  if (!j) return unexpected(j.error());
  const json* files = member(*j, "files");
  if (files == nullptr || !files->is_array()) {
    return unexpected(std::string("preupload answer has no files"));
  }
  std::vector<PreuploadAnswer> out;
  for (const auto& f : *files) {
    const auto path = text(f, "path");
    const auto mode = text(f, "uploadMode");
    if (!path || !mode) {
      return unexpected(std::string("preupload answer has a file without path or uploadMode"));
    }
    if (*mode != "lfs" && *mode != "regular") {
      return unexpected("preupload answer has uploadMode \"" + *mode + "\"");
    }
    out.push_back(PreuploadAnswer{*path, *mode == "lfs", flag(f, "shouldIgnore"),
                                  text(f, "oid").value_or("")});
  }
  return out;
}

std::string batch_body(const std::string& ref, const std::vector<LfsObject>& objects) {
  json list = json::array();
  for (const auto& o : objects) list.push_back({{"oid", o.oid}, {"size", o.size}});
  return json{{"operation", "upload"},
              {"transfers", {"basic", "multipart"}},
              {"hash_algo", "sha256"},
              {"ref", {{"name", ref}}},
              {"objects", list}}
      .dump();
}

Expected<std::vector<BatchAnswer>, std::string> parse_batch(const std::string& body,
                                                            const std::vector<LfsObject>& asked) {
  auto j = parse_object(body, "LFS batch");
  if (!j) return unexpected(j.error());
  const json* objects = member(*j, "objects");
  if (objects == nullptr || !objects->is_array()) {
    return unexpected(std::string("LFS batch answer has no objects"));
  }
  std::map<std::string, std::uint64_t> sizes;
  for (const auto& o : asked) sizes[o.oid] = o.size;
  std::map<std::string, BatchAnswer> by_oid;
  for (const auto& o : *objects) {
    BatchAnswer a;
    a.oid = text(o, "oid").value_or("");
    const auto asked_size = sizes.find(a.oid);
    if (asked_size == sizes.end()) {
      return unexpected("LFS batch answer has an object not asked for: \"" + a.oid + "\"");
    }
    if (const json* error = member(o, "error")) {
      const json* code = member(*error, "code");
      return unexpected("the Hub refused object " + a.oid + ": " +
                        text(*error, "message").value_or("no message") +
                        (code != nullptr ? " (code " + code->dump() + ")" : ""));
    }
    a.size = asked_size->second;
    const json* size = member(o, "size");
    if (size != nullptr && (!size->is_number_unsigned() || size->get<std::uint64_t>() != a.size)) {
      return unexpected("LFS batch answer gives object " + a.oid + " the size " + size->dump() +
                        ", not " + std::to_string(a.size));
    }
    const json* actions = member(o, "actions");
    a.stored = actions == nullptr || actions->empty();
    if (!a.stored) {
      if (!actions->is_object()) {
        return unexpected("object " + a.oid + ": actions is not an object");
      }
      if (auto ok = read_actions(*actions, a); !ok) return unexpected(ok.error());
    }
    by_oid[a.oid] = std::move(a);
  }
  std::vector<BatchAnswer> out;
  for (const auto& o : asked) {
    const auto it = by_oid.find(o.oid);
    if (it == by_oid.end()) return unexpected("LFS batch answer lacks object " + o.oid);
    out.push_back(it->second);
  }
  return out;
}

std::string completion_body(const std::string& oid, const std::vector<std::string>& etags) {
  json parts = json::array();
  for (std::size_t i = 0; i < etags.size(); ++i) {
    parts.push_back({{"partNumber", i + 1}, {"etag", etags[i]}});
  }
  return json{{"oid", oid}, {"parts", parts}}.dump();
}

std::string verify_body(const LfsObject& object) {
  return json{{"oid", object.oid}, {"size", object.size}}.dump();
}

std::string commit_payload(const CommitHeader& header, const std::vector<CommitFile>& files) {
  json h = {{"summary", header.summary}, {"description", header.description}};
  if (!header.parent_commit.empty()) h["parentCommit"] = header.parent_commit;
  std::string out = json{{"key", "header"}, {"value", h}}.dump() + "\n";
  for (const auto& f : files) {
    json line;
    if (f.lfs) {
      line = {
          {"key", "lfsFile"},
          {"value", {{"path", f.path}, {"algo", "sha256"}, {"oid", f.sha256}, {"size", f.size}}}};
    } else {
      line = {
          {"key", "file"},
          {"value", {{"path", f.path}, {"content", base64(f.content)}, {"encoding", "base64"}}}};
    }
    out += line.dump() + "\n";
  }
  return out;
}

Expected<CommitAnswer, std::string> parse_commit(const std::string& body) {
  auto j = parse_object(body, "commit");
  if (!j) return unexpected(j.error());
  CommitAnswer a;
  a.commit = text(*j, "commitOid").value_or("");
  if (!is_hex(a.commit, 40)) return unexpected(std::string("commit answer has no commitOid"));
  a.url = text(*j, "commitUrl").value_or("");
  return a;
}

}  // namespace whfs::publish
