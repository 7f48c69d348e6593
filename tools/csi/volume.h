#pragma once
// What a pod asks for (NodePublishVolume's volume_context and secrets), checked: which dataset,
// at which revision, from which endpoint, with which of the daemon's options. Pod authors write
// volume_context, so everything in it is hostile input to a root daemon: the endpoint must be
// one the node's admin allowed, the options one of a short list that changes only what is
// served (never a path the daemon opens, a library it loads or a port it binds), and the token
// travels only in `secrets`, never in a log line, an argv or the state file.

#include <map>
#include <string>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::csi {

// The keys of volume_context this plugin reads. Others under csi.storage.k8s.io/ (pod info,
// the ephemeral flag) are kubelet's and ignored; any other key is an error, so that a typo
// ("revison") is not silently the default.
inline constexpr const char* kRepoKey = "repo";
inline constexpr const char* kRevisionKey = "revision";
inline constexpr const char* kEndpointKey = "endpoint";
inline constexpr const char* kOptionsKey = "options";
// The keys of `secrets` (a Kubernetes Secret named by nodePublishSecretRef) that hold a token.
inline constexpr const char* kTokenKeys[] = {"token", "HF_TOKEN"};

// The daemon options a volume may set: they change what the mount shows or how patiently it
// fetches, nothing the node owns. Everything else (cache_*, cudart, python, log_file, metrics,
// token_file, proxy, insecure_token, allow_other, offline, ...) is the node admin's:
// wheelhouse-csi --daemon-option. An option the admin set is the admin's alone: a volume that
// sets it too is refused, and the admin's come last on the daemon's command line.
inline constexpr const char* kVolumeOptions[] = {
    "arch",         "torch",         "cuda",          "python_tag", "current",
    "nocurrent",    "refresh",       "streaming",     "readahead",  "connections",
    "read_timeout", "stall_timeout", "caller_timeout"};

// The numeric options' bounds for a volume (the admin's are the daemon's own), as the help
// text states them.
std::string volume_option_bounds();

struct VolumeSpec {
  std::string endpoint;              // normalised: no trailing slash
  std::string repo;                  // owner/name
  std::string revision;              // default "main"
  std::vector<std::string> options;  // key[=value], sorted, from kVolumeOptions
  std::string token;                 // from secrets; may be empty

  // One daemon serves every volume with the same key: same endpoint, repo, revision, options
  // and token (a pod without the token never reads through a daemon that holds one). 16 hex
  // digits of a SHA-256; the token enters only as its hash.
  std::string key() const;
  // "endpoint repo@revision [options]", without the token.
  std::string describe() const;
};

struct ParseLimits {
  std::vector<std::string> allowed_endpoints;  // normalised; the first is the default
  std::vector<std::string> node_options;       // the admin's key[=value] (--daemon-option)
};

// The spec of one request, or a message that says which key is wrong and why (INVALID_ARGUMENT).
Expected<VolumeSpec, std::string> parse_volume(const std::map<std::string, std::string>& context,
                                               const std::map<std::string, std::string>& secrets,
                                               const ParseLimits& limits);

// "https://huggingface.co/" -> "https://huggingface.co"; empty when it is not an http(s) URL.
std::string normalise_endpoint(std::string_view url);

}  // namespace whfs::csi
