#pragma once
// A non-owning reference to a callable (like C++26 std::function_ref): no allocation and one
// indirect call, for the per-block callback of the read path.

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace whfs {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  // Constrained so that it never stands for the copy or move constructor (clang-tidy 14 does
  // not read requires-clauses).
  // NOLINTBEGIN(bugprone-forwarding-reference-overload)
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>) FunctionRef(F&& f)
  noexcept  // NOLINT: implicit, like std::function_ref
      : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* obj, Args... args) -> R {
          return std::invoke(*static_cast<std::add_pointer_t<F>>(obj), std::forward<Args>(args)...);
        }) {}
  // NOLINTEND(bugprone-forwarding-reference-overload)

  R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

}  // namespace whfs
