#pragma once
// Why a publish stopped, by kind: the command line turns each kind into its exit code.

#include <string>

namespace whfs::publish {

struct PublishError {
  enum class Kind {
    kDenied,    // no token, or the Hub refused it: invalid, read-only, no access to a gated repo
    kConflict,  // another file is at a wheel's path (and --replace was not given)
    kNotFound,  // the repository or the revision (or a private repo the token cannot see)
    kStale,     // the branch moved since the commit was planned (412): plan again
    kFailed,    // the network or the Hub failed (after retries), or an answer made no sense
  };
  Kind kind = Kind::kFailed;
  std::string message;  // one line; never a token or a signed URL's query
};

}  // namespace whfs::publish
