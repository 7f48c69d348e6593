#include "fs/targeting/pep440.h"

#include <compare>
#include <limits>

namespace whfs::target {
namespace {

class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  bool done() const { return i_ == s_.size(); }
  char peek() const { return done() ? '\0' : lower(s_[i_]); }
  bool digit() const { return peek() >= '0' && peek() <= '9'; }
  void skip_separator() {
    if (peek() == '.' || peek() == '-' || peek() == '_') ++i_;
  }
  std::size_t pos() const { return i_; }
  void rewind(std::size_t pos) { i_ = pos; }

  // Consumes `word` (lowercase) when it is next.
  bool eat(std::string_view word) {
    if (s_.size() - i_ < word.size()) return false;
    for (std::size_t k = 0; k < word.size(); ++k) {
      if (lower(s_[i_ + k]) != word[k]) return false;
    }
    i_ += word.size();
    return true;
  }

  std::optional<std::uint64_t> number() {
    if (!digit()) return std::nullopt;
    std::uint64_t v = 0;
    while (digit()) {
      const auto d = static_cast<std::uint64_t>(peek() - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return std::nullopt;
      v = v * 10 + d;
      ++i_;
    }
    return v;
  }

  std::string_view rest() const { return s_.substr(i_); }

 private:
  static char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
  std::string_view s_;
  std::size_t i_ = 0;
};

// The pre-release spellings PEP 440 accepts, longest first so "alpha" is not read as "a".
struct PreSpelling {
  std::string_view word;
  int kind;
};
constexpr PreSpelling kPre[] = {{"preview", 2}, {"alpha", 0}, {"beta", 1}, {"pre", 2},
                                {"rc", 2},      {"a", 0},     {"b", 1},    {"c", 2}};

bool parse_local(std::string_view text, std::vector<std::string>& out) {
  std::string seg;
  for (char c : text) {
    if (c == '.' || c == '-' || c == '_') {
      if (seg.empty()) return false;
      out.push_back(std::move(seg));
      seg.clear();
    } else if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      seg.push_back((c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c);
    } else {
      return false;
    }
  }
  if (seg.empty()) return false;
  out.push_back(std::move(seg));
  return true;
}

bool all_digits(const std::string& s) {
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// packaging's rule: a numeric local segment sorts after an alphanumeric one; numbers compare
// as numbers, the rest as strings.
int compare_local_segment(const std::string& a, const std::string& b) {
  const bool na = all_digits(a);
  const bool nb = all_digits(b);
  if (na != nb) return na ? 1 : -1;
  if (na) {
    const auto ta = a.find_first_not_of('0');
    const auto tb = b.find_first_not_of('0');
    const std::string_view va = ta == std::string::npos ? "" : std::string_view(a).substr(ta);
    const std::string_view vb = tb == std::string::npos ? "" : std::string_view(b).substr(tb);
    if (va.size() != vb.size()) return va.size() < vb.size() ? -1 : 1;
    return va.compare(vb) < 0 ? -1 : (va == vb ? 0 : 1);
  }
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

template <class T>
int sign(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

// The pre-release key: a dev-only release (1.0.dev1) sorts before 1.0a1; a final release after
// every pre-release.
std::pair<int, std::uint64_t> pre_key(const Pep440Version& v) {
  if (v.pre_kind < 0 && !v.post && v.dev) return {-2, 0};
  if (v.pre_kind < 0) return {3, 0};
  return {v.pre_kind, v.pre_number};
}

}  // namespace

std::optional<Pep440Version> parse_pep440(std::string_view text) {
  Cursor c(text);
  Pep440Version v;
  c.eat("v");
  auto first = c.number();
  if (!first) return std::nullopt;
  if (c.peek() == '!') {
    c.eat("!");
    v.epoch = *first;
    first = c.number();
    if (!first) return std::nullopt;
  }
  v.release.push_back(*first);
  while (c.peek() == '.') {
    const auto at = c.pos();
    c.eat(".");
    auto n = c.number();
    if (!n) {
      c.rewind(at);  // ".post1", ".dev0": not a release part
      break;
    }
    v.release.push_back(*n);
  }
  while (v.release.size() > 1 && v.release.back() == 0) v.release.pop_back();
  if (v.release.size() == 1 && v.release.back() == 0) v.release.clear();

  auto at = c.pos();
  c.skip_separator();
  bool pre = false;
  for (const auto& p : kPre) {
    if (c.eat(p.word)) {
      v.pre_kind = p.kind;
      c.skip_separator();
      v.pre_number = c.number().value_or(0);
      pre = true;
      break;
    }
  }
  if (!pre) c.rewind(at);

  at = c.pos();
  c.skip_separator();
  if (c.eat("post") || c.eat("rev") || c.eat("r")) {
    c.skip_separator();
    v.post = c.number().value_or(0);
  } else {
    c.rewind(at);
  }

  at = c.pos();
  c.skip_separator();
  if (c.eat("dev")) {
    c.skip_separator();
    v.dev = c.number().value_or(0);
  } else {
    c.rewind(at);
  }

  if (c.peek() == '+') {
    c.eat("+");
    if (!parse_local(c.rest(), v.local)) return std::nullopt;
    return v;
  }
  if (!c.done()) return std::nullopt;
  return v;
}

int compare_versions(std::string_view a, std::string_view b) {
  const auto va = parse_pep440(a);
  const auto vb = parse_pep440(b);
  if (!va || !vb) {
    if (va) return 1;
    if (vb) return -1;
    return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
  }
  if (int s = sign(va->epoch, vb->epoch)) return s;
  if (int s = sign(va->release, vb->release)) return s;
  if (int s = sign(pre_key(*va), pre_key(*vb))) return s;
  // No post release sorts before any; no dev release sorts after any.
  if (int s = sign(va->post.has_value(), vb->post.has_value())) return s;
  if (int s = sign(va->post.value_or(0), vb->post.value_or(0))) return s;
  if (int s = sign(!va->dev.has_value(), !vb->dev.has_value())) return s;
  if (int s = sign(va->dev.value_or(0), vb->dev.value_or(0))) return s;
  const auto& la = va->local;
  const auto& lb = vb->local;
  for (std::size_t i = 0; i < la.size() && i < lb.size(); ++i) {
    if (int s = compare_local_segment(la[i], lb[i])) return s;
  }
  return sign(la.size(), lb.size());
}

}  // namespace whfs::target
