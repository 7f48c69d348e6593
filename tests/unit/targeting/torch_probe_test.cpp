#include "fs/targeting/torch_probe.h"

#include <gtest/gtest.h>

#include "fs/targeting/root_fs.h"
#include "tests/unit/targeting/fixtures.h"

namespace whfs::target {
namespace {

using testing::TempDir;
using testing::write_torch;

// This machine's files, as RootFs would give them for the root "/".
Expected<TorchInfo, std::string> find_torch(const std::vector<std::string>& dirs) {
  static const RootFs root = std::move(*RootFs::open("/"));
  return target::find_torch(dirs,
                            [](const std::string& path) { return root.read_file(path, 64 << 10); });
}

struct Install {
  const char* version;
  const char* cuda;
  const char* major_minor;
};

TEST(TorchProbe, ReadsFakeInstalls) {
  const Install installs[] = {
      {"2.7.1+cu128", "12.8", "2.7"},
      {"2.9.0+cu128", "12.8", "2.9"},
      {"2.9.0+cu126", "12.6", "2.9"},
      {"2.9.0+cpu", "", "2.9"},  // CPU build: cuda = None
  };
  for (const auto& i : installs) {
    TempDir dir;
    write_torch(dir.path() / "site-packages", i.version, i.cuda);
    const auto t = find_torch({dir.str("empty"), dir.str("site-packages")});
    ASSERT_TRUE(t) << t.error();
    EXPECT_EQ(t->version, i.version);
    EXPECT_EQ(t->cuda, i.cuda);
    EXPECT_EQ(t->major_minor, i.major_minor);
    EXPECT_EQ(t->path, dir.str("site-packages/torch/version.py"));
  }
}

TEST(TorchProbe, AbsentTorchNamesTheFolders) {
  TempDir dir;
  const auto t = find_torch({dir.str("a"), dir.str("b")});
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error(), "torch not found in " + dir.str("a") + ", " + dir.str("b"));
}

TEST(TorchProbe, FirstInImportOrderWins) {
  TempDir dir;
  write_torch(dir.path() / "user", "2.9.0+cu126", "12.6");
  write_torch(dir.path() / "system", "2.7.0+cu128", "12.8");
  const auto t = find_torch({dir.str("user"), dir.str("system")});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->version, "2.9.0+cu126");
}

TEST(TorchProbe, OlderAndOddSpellings) {
  auto t = parse_torch_version_py(
      "__version__ = \"2.1.2+cu121\"\ndebug = False\ncuda = \"12.1\"  # comment\n"
      "git_version = 'abc'\nhip = None\n");
  ASSERT_TRUE(t) << t.error();
  EXPECT_EQ(t->version, "2.1.2+cu121");
  EXPECT_EQ(t->cuda, "12.1");
  t = parse_torch_version_py("__version__ = '2.5.1+rocm6.2'\ncuda = None\nhip = '6.2.41133'\n");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->cuda, "");
  EXPECT_EQ(t->hip, "6.2.41133");
  // Indented lines and comparisons are not assignments of the module.
  t = parse_torch_version_py("__version__ = '2.9.0'\nif x:\n    cuda = '11.8'\nz = cuda == '1'\n");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->cuda, "");
}

TEST(TorchProbe, UnparsableFileIsNamed) {
  TempDir dir;
  testing::write_file(dir.path() / "site" / "torch" / "version.py", "print('hi')\n");
  const auto t = find_torch({dir.str("site")});
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error(), dir.str("site/torch/version.py") + ": no __version__ = '...' line");
  EXPECT_FALSE(parse_torch_version_py("__version__ = 'nightly'\n"));
}

}  // namespace
}  // namespace whfs::target
