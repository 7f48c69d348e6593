// Linked into every unit test: creates spdlog's registry before main, so before any thread.
// The registry is a function-local static inside libspdlog.so, which TSan does not instrument;
// created lazily by the first of several threads that log at once, TSan reports its creation
// as a race with the others' reads (a false positive that depends on which test logs first).
#include <spdlog/spdlog.h>

namespace {

[[maybe_unused]] const bool kLoggerFirst = [] {
  spdlog::default_logger_raw();
  return true;
}();

}  // namespace
