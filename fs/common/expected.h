#pragma once
// A small stand-in for C++23 std::expected (GCC 12 has it only with -std=c++23): a value or a
// typed error. Every layer returns its own error type through it; errno mapping happens once,
// in the FUSE adapter.

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

namespace whfs {

template <class E>
struct Unexpected {
  E error;
};

template <class T>
inline constexpr bool is_unexpected_v = false;
template <class E>
inline constexpr bool is_unexpected_v<Unexpected<E>> = true;

template <class E>
Unexpected<std::decay_t<E>> unexpected(E&& e) {
  return {std::forward<E>(e)};
}

template <class T, class E>
class [[nodiscard]] Expected {
 public:
  using value_type = T;
  using error_type = E;

  // Implicit, and constrained so that it never stands for the copy or move constructor
  // (clang-tidy 14 does not read requires-clauses).
  // NOLINTBEGIN(bugprone-forwarding-reference-overload)
  template <class U = T>
  requires std::is_constructible_v<T, U&&> &&(!std::is_same_v<std::remove_cvref_t<U>, Expected>)&&(
      !is_unexpected_v<std::remove_cvref_t<U>>)Expected(U&& v)
      : v_(std::in_place_index<0>, std::forward<U>(v)) {}  // NOLINT: implicit
  // NOLINTEND(bugprone-forwarding-reference-overload)
  template <class G>
  requires std::is_constructible_v<E, G&&> Expected(Unexpected<G> u)
      : v_(std::in_place_index<1>, E(std::move(u.error))) {}  // NOLINT

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  E& error() & { return std::get<1>(v_); }
  const E& error() const& { return std::get<1>(v_); }
  E&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, E> v_;
};

// Success-or-error with no value.
template <class E>
class [[nodiscard]] Expected<void, E> {
 public:
  using value_type = void;
  using error_type = E;

  Expected() = default;
  template <class G>
  requires std::is_constructible_v<E, G&&> Expected(Unexpected<G> u)
      : err_(E(std::move(u.error))), ok_(false) {}  // NOLINT: implicit

  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  E& error() & { return err_; }
  const E& error() const& { return err_; }

 private:
  E err_{};
  bool ok_ = true;
};

}  // namespace whfs
