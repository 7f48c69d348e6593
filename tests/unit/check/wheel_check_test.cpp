// inspect_wheel: what a wheel must be before it is published, each refusal in one line.
#include "fs/check/wheel_check.h"

#include <gtest/gtest.h>

#include "tests/support/fakehub.h"
#include "tests/unit/check/test_wheels.h"

namespace whfs::check {
namespace {

using test::Member;

class WheelCheck : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& file, std::vector<Member> members,
                              const std::string* record = nullptr) {
    return test::write_wheel(dir_.path(), file, std::move(members), record);
  }
  std::string refusal(const std::filesystem::path& p) {
    auto r = inspect_wheel(p);
    EXPECT_FALSE(r) << p;
    return r ? "" : r.error();
  }
  whfs::test::TempDir dir_{"publish-wheel"};
  const std::string file_ = "demo_pkg-1.0+cu128torch2.9-py3-none-any.whl";
  const std::string info_ = "demo_pkg-1.0+cu128torch2.9.dist-info/";
};

TEST_F(WheelCheck, AGoodWheelIsHashedAndItsMembersCounted) {
  auto members = test::wheel_members("demo_pkg", "1.0+cu128torch2.9", "py3-none-any",
                                     std::string(300000, 'a'));  // deflated, read in pieces
  members.push_back({"demo_pkg/stored.bin", std::string(3 << 20, '\7')});  // > 1 MiB, stored
  members.push_back({"demo_pkg/empty", ""});
  members.push_back({"demo_pkg/sub/", ""});  // a folder entry: no RECORD line needed
  const auto p = write(file_, members);
  auto r = inspect_wheel(p);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->name.distribution, "demo_pkg");
  EXPECT_EQ(r->name.version, "1.0+cu128torch2.9");
  EXPECT_EQ(r->members, 6u);  // 5 files + RECORD
  const std::string bytes = whfs::test::read_file(p.string());
  EXPECT_EQ(r->content.size, bytes.size());
  EXPECT_EQ(r->content.sha256, sha256_hex(bytes));
  Hasher git = git_blob_hasher(bytes.size());
  git.update(bytes);
  EXPECT_EQ(r->content.git_sha1, to_hex(git.finish()));
  EXPECT_EQ(r->sample, bytes.substr(0, 512));
}

TEST_F(WheelCheck, TheFileNameMustBeAWheelName) {
  const auto p = write("demo_pkg-1.0.whl", test::wheel_members("demo_pkg", "1.0"));
  EXPECT_EQ(refusal(p),
            "demo_pkg-1.0.whl: not a valid wheel file name "
            "(name-version[-build]-python-abi-platform.whl)");
  EXPECT_NE(refusal(dir_.path() + "/missing-1.0-py3-none-any.whl").find("cannot open it"),
            std::string::npos);
  std::ofstream(dir_.path() + "/text-1.0-py3-none-any.whl") << "not a zip";
  EXPECT_NE(refusal(dir_.path() + "/text-1.0-py3-none-any.whl").find("not a valid zip file"),
            std::string::npos);
}

TEST_F(WheelCheck, MetadataWheelAndRecordAreRequired) {
  for (const char* missing : {"METADATA", "WHEEL"}) {
    auto members = test::wheel_members("demo_pkg", "1.0+cu128torch2.9");
    std::erase_if(members, [&](const Member& m) { return m.name == info_ + missing; });
    EXPECT_EQ(refusal(write(file_, members)), file_ + ": no single *.dist-info/" + missing);
  }
  auto members = test::wheel_members("demo_pkg", "1.0+cu128torch2.9");
  std::ofstream(dir_.path() + "/" + file_, std::ios::binary) << test::make_zip(members);
  EXPECT_EQ(refusal(dir_.path() + "/" + file_), file_ + ": no single *.dist-info/RECORD");
}

TEST_F(WheelCheck, RecordMustMatchEveryMember) {
  auto members = test::wheel_members("demo_pkg", "1.0+cu128torch2.9");
  const std::string record_name = info_ + "RECORD";
  std::string record = test::record_for(members, record_name);
  std::string tampered = record;
  tampered.replace(tampered.find("sha256=") + 7, 4, "AAAA");
  EXPECT_EQ(refusal(write(file_, members, &tampered)),
            file_ + ": demo_pkg/__init__.py does not match its hash in RECORD");
  std::string no_line = record.substr(record.find('\n') + 1);
  EXPECT_EQ(refusal(write(file_, members, &no_line)),
            file_ + ": RECORD has no line for demo_pkg/__init__.py");
  std::string extra = record + "demo_pkg/gone.py,sha256=abc,3\n";
  EXPECT_EQ(refusal(write(file_, members, &extra)),
            file_ + ": RECORD lists demo_pkg/gone.py, which the wheel does not hold");
  std::string md5 = "demo_pkg/__init__.py,md5=abc,6\n" + no_line;
  EXPECT_EQ(refusal(write(file_, members, &md5)),
            file_ + ": RECORD gives demo_pkg/__init__.py no sha256 hash");
  std::string size = record;
  size.replace(size.find(",6\n"), 3, ",7\n");
  EXPECT_EQ(refusal(write(file_, members, &size)),
            file_ + ": RECORD gives demo_pkg/__init__.py the size 7, the zip 6");
  // Quoted CSV fields are read as CSV.
  std::string quoted = "\"demo_pkg/__init__.py\"," + record.substr(record.find(',') + 1);
  EXPECT_TRUE(inspect_wheel(write(file_, members, &quoted)));
}

TEST_F(WheelCheck, TheZipsOwnChecksCount) {
  auto members = test::wheel_members("demo_pkg", "1.0+cu128torch2.9");
  members[0].bad_crc = true;
  EXPECT_EQ(refusal(write(file_, members)), file_ + ": demo_pkg/__init__.py: CRC-32 mismatch");
}

TEST_F(WheelCheck, MetadataMustNameTheWheelsProjectAndVersion) {
  auto members = test::wheel_members("demo_pkg", "1.0+cu128torch2.9");
  members[1].data = "Metadata-Version: 2.1\nName: other\nVersion: 1.0+cu128torch2.9\n";
  EXPECT_EQ(refusal(write(file_, members)),
            file_ + ": its METADATA names the project other, its file name demo_pkg");
  members[1].data = "Metadata-Version: 2.1\nName: Demo-Pkg\nVersion: 1.0\n";
  EXPECT_EQ(refusal(write(file_, members)),
            file_ + ": its METADATA has version 1.0, its file name 1.0+cu128torch2.9");
  members[1].data = "Metadata-Version: 2.1\nVersion: 1.0\n";
  EXPECT_EQ(refusal(write(file_, members)), file_ + ": its METADATA has no Name or no Version");
  // Another spelling of the same project is the same project.
  members[1].data = "Metadata-Version: 2.1\nName: Demo-Pkg\nVersion: 1.0+cu128torch2.9\n";
  EXPECT_TRUE(inspect_wheel(write(file_, members)));
}

TEST_F(WheelCheck, TheDistInfoFolderIsTheWheels) {
  auto members = test::wheel_members("other", "1.0+cu128torch2.9");
  members[0].name = "demo_pkg/__init__.py";
  EXPECT_EQ(refusal(write(file_, members)),
            file_ +
                ": its metadata folder other-1.0+cu128torch2.9.dist-info is not "
                "demo_pkg-1.0+cu128torch2.9.dist-info");
  members = test::wheel_members("demo_pkg", "1.0+cu128torch2.9");
  members[2].data = "Wheel-Version: 2.0\n";
  EXPECT_EQ(refusal(write(file_, members)),
            file_ + ": its WHEEL file has Wheel-Version 2.0 (installers read 1.x)");
}

}  // namespace
}  // namespace whfs::check
