#include "fs/targeting/tags.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "fs/targeting/child_process.h"
#include "fs/targeting/python_info.h"
#include "tests/unit/targeting/python_oracle.h"

namespace whfs::target {
namespace {

SupportedTags cpython(int minor, int glibc_minor, const std::string& arch = "x86_64") {
  return SupportedTags(cpython_tags({3, minor, ""}, linux_platform_tags(arch, 2, glibc_minor)));
}

std::optional<std::size_t> rank_of(const std::string& wheel, const SupportedTags& tags) {
  const auto w = parse_wheel_name(wheel);
  if (!w) ADD_FAILURE() << "not a wheel name: " << wheel;
  return w ? wheel_rank(*w, tags) : std::nullopt;
}

TEST(Tags, LinuxPlatformsBestFirstWithLegacyAliases) {
  const auto p = linux_platform_tags("x86_64", 2, 36);
  ASSERT_EQ(p.size(), 32u + 3u + 1u);  // 2.36 .. 2.5, three legacy names, linux_x86_64
  EXPECT_EQ(p.front(), "manylinux_2_36_x86_64");
  EXPECT_EQ(p.back(), "linux_x86_64");
  const auto at = [&](const std::string& t) {
    return std::find(p.begin(), p.end(), t) - p.begin();
  };
  EXPECT_EQ(at("manylinux2014_x86_64"), at("manylinux_2_17_x86_64") + 1);
  EXPECT_EQ(at("manylinux2010_x86_64"), at("manylinux_2_12_x86_64") + 1);
  EXPECT_EQ(at("manylinux1_x86_64"), at("manylinux_2_5_x86_64") + 1);

  const auto arm = linux_platform_tags("aarch64", 2, 28);
  EXPECT_EQ(arm.size(), 12u + 1u + 1u);  // 2.28 .. 2.17, manylinux2014, linux
  EXPECT_EQ(std::count(arm.begin(), arm.end(), "manylinux2010_aarch64"), 0);

  EXPECT_EQ(linux_platform_tags("x86_64", 0, 0), std::vector<std::string>{"linux_x86_64"});
}

TEST(Tags, CPythonOrderFollowsPip) {
  const auto tags = cpython(12, 36);
  auto r = [&](const std::string& i, const std::string& a, const std::string& p) {
    const auto v = tags.rank(Tag{i, a, p});
    EXPECT_TRUE(v) << i << "-" << a << "-" << p;
    return v.value_or(0);
  };
  EXPECT_EQ(tags.tags().front().str(), "cp312-cp312-manylinux_2_36_x86_64");
  EXPECT_EQ(tags.tags().back().str(), "py30-none-any");
  const std::size_t ordered[] = {r("cp312", "cp312", "manylinux_2_36_x86_64"),
                                 r("cp312", "cp312", "linux_x86_64"),
                                 r("cp312", "abi3", "manylinux_2_36_x86_64"),
                                 r("cp312", "none", "linux_x86_64"),
                                 r("cp311", "abi3", "manylinux_2_36_x86_64"),
                                 r("cp32", "abi3", "linux_x86_64"),
                                 r("py312", "none", "manylinux_2_36_x86_64"),
                                 r("py3", "none", "linux_x86_64"),
                                 r("py311", "none", "manylinux_2_5_x86_64"),
                                 r("cp312", "none", "any"),
                                 r("py312", "none", "any"),
                                 r("py3", "none", "any"),
                                 r("py311", "none", "any")};
  for (std::size_t i = 0; i + 1 < std::size(ordered); ++i) {
    EXPECT_LT(ordered[i], ordered[i + 1]) << "at " << i;
  }
  EXPECT_FALSE(tags.rank(Tag{"cp313", "abi3", "linux_x86_64"}));
  EXPECT_FALSE(tags.rank(Tag{"cp31", "abi3", "linux_x86_64"}));  // abi3 began with 3.2
}

TEST(Tags, DebugAndFreeThreadedBuilds) {
  const auto platforms = linux_platform_tags("x86_64", 2, 36);
  const SupportedTags debug(cpython_tags({3, 12, "d"}, platforms));
  EXPECT_TRUE(debug.rank(Tag{"cp312", "cp312d", "linux_x86_64"}));
  EXPECT_TRUE(debug.rank(Tag{"cp312", "cp312", "linux_x86_64"}));  // normal modules load too
  const SupportedTags threaded(cpython_tags({3, 13, "t"}, platforms));
  EXPECT_TRUE(threaded.rank(Tag{"cp313", "cp313t", "linux_x86_64"}));
  EXPECT_FALSE(threaded.rank(Tag{"cp313", "abi3", "linux_x86_64"}));  // no stable ABI there
  EXPECT_FALSE(threaded.rank(Tag{"cp313", "cp313", "linux_x86_64"}));
}

struct Case {
  const char* wheel;
  int python_minor;
  int glibc_minor;
  const char* arch;
  bool installable;
};

// pip's decision for each wheel on each interpreter.
TEST(Tags, MatcherTable) {
  const Case cases[] = {
      {"o_voxel-0.0.1+cu128torch2.9-py3-none-any.whl", 11, 36, "x86_64", true},
      {"o_voxel-0.0.1+cu128torch2.9-py3-none-any.whl", 12, 17, "aarch64", true},
      {"nvdiffrec_render-0.1.0+cu128torch2.9-cp39-abi3-manylinux_2_28_x86_64.whl", 11, 36, "x86_64",
       true},
      {"nvdiffrec_render-0.1.0+cu128torch2.9-cp39-abi3-manylinux_2_28_x86_64.whl", 12, 36, "x86_64",
       true},
      {"nvdiffrec_render-0.1.0+cu128torch2.9-cp39-abi3-manylinux_2_28_x86_64.whl", 8, 36, "x86_64",
       false},  // abi3 from 3.9 does not load on 3.8
      {"nvdiffrec_render-0.1.0+cu128torch2.9-cp39-abi3-manylinux_2_28_x86_64.whl", 12, 17, "x86_64",
       false},  // glibc 2.17 is older than the wheel needs
      {"flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl", 12, 36, "x86_64", true},
      {"flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl", 11, 36, "x86_64", false},
      {"foo-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", 12, 28, "x86_64", true},
      {"foo-1.0-cp312-cp312-manylinux2014_x86_64.whl", 12, 17, "x86_64", true},
      {"foo-1.0-cp312-cp312-manylinux1_x86_64.whl", 12, 36, "x86_64", true},
      {"foo-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", 12, 27, "x86_64", false},
      {"foo-1.0-cp312-cp312-win_amd64.whl", 12, 36, "x86_64", false},
      {"foo-1.0-cp312-cp312-manylinux_2_28_aarch64.whl", 12, 36, "x86_64", false},
      {"foo-1.0-cp312-cp312-macosx_11_0_arm64.whl", 12, 36, "x86_64", false},
      {"foo-1.0-cp310-cp310-linux_x86_64.whl", 11, 36, "x86_64", false},
      {"foo-1.0-cp311-abi3-linux_x86_64.whl", 10, 36, "x86_64", false},
      {"foo-1.0-py2.py3-none-any.whl", 11, 36, "x86_64", true},
      {"foo-1.0-py2-none-any.whl", 11, 36, "x86_64", false},
      {"foo-1.0-py310-none-any.whl", 11, 36, "x86_64", true},
      {"foo-1.0-py312-none-any.whl", 11, 36, "x86_64", false},
      {"foo-1.0-cp311-none-any.whl", 11, 36, "x86_64", true},
      {"foo-1.0-pp310-pypy310_pp73-linux_x86_64.whl", 10, 36, "x86_64", false},
  };
  for (const auto& c : cases) {
    const auto tags = cpython(c.python_minor, c.glibc_minor, c.arch);
    EXPECT_EQ(rank_of(c.wheel, tags).has_value(), c.installable)
        << c.wheel << " on cp3" << c.python_minor << ", glibc 2." << c.glibc_minor << ", "
        << c.arch;
  }
}

std::vector<WheelName> names(std::initializer_list<const char*> files) {
  std::vector<WheelName> out;
  for (const char* f : files) out.push_back(*parse_wheel_name(f));
  return out;
}

std::string best(const std::vector<WheelName>& wheels, const SupportedTags& tags) {
  const auto i = best_wheel(wheels, tags);
  return i ? wheel_file_name(wheels[*i]) : "(none)";
}

TEST(Tags, PicksTheOneWheelPipWould) {
  const auto wheels = names({
      "flash_attn-2.8.3+cu128torch2.9-cp310-cp310-linux_x86_64.whl",
      "flash_attn-2.8.3+cu128torch2.9-cp311-cp311-linux_x86_64.whl",
      "flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl",
      "flash_attn-2.8.3+cu128torch2.9-cp39-abi3-manylinux_2_28_x86_64.whl",
      "flash_attn-2.8.3+cu128torch2.9-py3-none-any.whl",
  });
  EXPECT_EQ(best(wheels, cpython(12, 36)),
            "flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl");
  EXPECT_EQ(best(wheels, cpython(11, 36)),
            "flash_attn-2.8.3+cu128torch2.9-cp311-cp311-linux_x86_64.whl");
  EXPECT_EQ(best(wheels, cpython(13, 36)),
            "flash_attn-2.8.3+cu128torch2.9-cp39-abi3-manylinux_2_28_x86_64.whl");
  EXPECT_EQ(best(wheels, cpython(13, 17)),  // too old a glibc for the abi3 wheel
            "flash_attn-2.8.3+cu128torch2.9-py3-none-any.whl");
  EXPECT_EQ(best(wheels, cpython(8, 36)), "flash_attn-2.8.3+cu128torch2.9-py3-none-any.whl");
  EXPECT_EQ(best(names({"foo-1.0-cp312-cp312-win_amd64.whl"}), cpython(12, 36)), "(none)");
  EXPECT_EQ(best({}, cpython(12, 36)), "(none)");
}

TEST(Tags, NewerVersionThenTagThenBuildThenName) {
  const auto tags = cpython(12, 36);
  // pip sorts by version before tags: a newer pure wheel beats an older exact one.
  EXPECT_EQ(best(names({"foo-1.0-cp312-cp312-linux_x86_64.whl", "foo-1.1-py3-none-any.whl"}), tags),
            "foo-1.1-py3-none-any.whl");
  EXPECT_EQ(best(names({"foo-1.0-1-py3-none-any.whl", "foo-1.0-2-py3-none-any.whl",
                        "foo-1.0-py3-none-any.whl"}),
                 tags),
            "foo-1.0-2-py3-none-any.whl");
  // Same version, rank and build: the smaller file name, whatever the input order.
  EXPECT_EQ(best(names({"foo-1.0-py3-none-any.whl", "Foo-1.0-py3-none-any.whl"}), tags),
            "Foo-1.0-py3-none-any.whl");
  EXPECT_EQ(best(names({"Foo-1.0-py3-none-any.whl", "foo-1.0-py3-none-any.whl"}), tags),
            "Foo-1.0-py3-none-any.whl");
}

// The tag list of this machine's python3 equals the one `pip install` decides with
// (pip._internal.utils.compatibility_tags.get_supported, over pip's vendored packaging), tag for
// tag, when pip is there to ask. pip's internals are no API: when they move, the test skips.
TEST(Tags, SameListAsPipOnThisMachine) {
  const auto py = testing::probe_python(PYTHON3_EXECUTABLE);
  ASSERT_TRUE(py) << py.error();
  const auto pip = run_program({PYTHON3_EXECUTABLE, "-c",
                                "from pip._vendor.packaging import __version__ as v\n"
                                "from pip._internal.utils.compatibility_tags import get_supported\n"
                                "print(v)\n"
                                "print('\\n'.join(str(t) for t in get_supported()))\n"},
                               std::chrono::seconds(30));
  if (!pip.ok()) GTEST_SKIP() << "pip's tag list is not importable: " << pip.err;
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t nl; (nl = pip.out.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(pip.out.substr(start, nl - start));
  }
  ASSERT_FALSE(lines.empty());
  const std::string version = lines.front();
  lines.erase(lines.begin());
  if (version.starts_with("26.") || version.starts_with("27.")) {
    GTEST_SKIP() << "packaging " << version << " orders linux_<arch> first";
  }
  const auto [gmaj, gmin] = parse_glibc_version(py->glibc);
  const auto ours = cpython_tags({py->major, py->minor, py->abiflags},
                                 linux_platform_tags(linux_wheel_arch(*py), gmaj, gmin));
  std::vector<std::string> ours_text;
  for (const auto& t : ours) ours_text.push_back(t.str());
  EXPECT_EQ(ours_text.size(), lines.size());
  for (std::size_t i = 0; i < std::min(ours_text.size(), lines.size()); ++i) {
    ASSERT_EQ(ours_text[i], lines[i]) << "first difference at " << i;
  }
}

}  // namespace
}  // namespace whfs::target
