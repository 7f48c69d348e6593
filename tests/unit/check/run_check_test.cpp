// check_runs: real shared objects built here with g++ -shared, given .nv_fatbin sections
// (objcopy --add-section) written from fatbin.h's documented layout, in real wheels; a fake
// torch whose libc10.so is built here too; the GLIBC_ versions they need.
#include "fs/check/run_check.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tests/support/fakehub.h"
#include "tests/support/fatbin_writer.h"
#include "tests/unit/check/test_wheels.h"

namespace whfs::check {
namespace {

using whfs::test::FatEntrySpec;
using whfs::test::ptx;
using whfs::test::sass;

class RunCheck : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.path() + "/" + name; }

  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }

  void sh(const std::string& cmd) const {
    ASSERT_EQ(std::system(("cd " + dir_.path() + " && " + cmd).c_str()), 0) << cmd;
  }

  // lib<name>.so from C++ `source`, with `fatbin` as its .nv_fatbin section when not empty.
  std::string build_so(const std::string& name, const std::string& source,
                       const std::string& fatbin = "", const std::string& flags = "") {
    write(name + ".cpp", source);
    sh("g++ -shared -fPIC -O1 " + flags + " -o lib" + name + ".so " + name + ".cpp");
    if (!fatbin.empty()) {
      write(name + ".fatbin", fatbin);
      sh("objcopy --add-section .nv_fatbin=" + name + ".fatbin lib" + name + ".so");
    }
    return whfs::test::read_file(path("lib" + name + ".so"));
  }

  std::filesystem::path wheel(const std::string& so, bool deflate = true,
                              const std::string& member = "demo_ext/_C.so") {
    auto members = test::wheel_members("demo_ext", "1.0");
    members.push_back({member, so, deflate});
    return test::write_wheel(dir_.path(), "demo_ext-1.0-cp311-cp311-linux_x86_64.whl", members);
  }

  static RunTarget on(std::vector<target::ComputeCapability> archs, std::string glibc = "2.36") {
    RunTarget t;
    t.key = "test";
    t.archs = std::move(archs);
    t.glibc = std::move(glibc);
    t.torch_note = "no torch in this test";
    return t;
  }

  RunReport check(const std::filesystem::path& w, const RunTarget& t) {
    auto r = check_runs(w, t);
    EXPECT_TRUE(r) << r.error();
    return r ? *r : RunReport{};
  }

  std::string kernel_so(const std::vector<std::vector<FatEntrySpec>>& containers,
                        const std::string& name = "kernels") {
    return build_so(name, "extern \"C\" int launch() { return 1; }\n",
                    whfs::test::fatbin_section(containers));
  }

  whfs::test::TempDir dir_{"run-check"};
};

std::string all(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST_F(RunCheck, Sm80SassRunsOnSm80AndSm86AndIsRefusedOnSm90AndSm120) {
  const auto w = wheel(kernel_so({{sass(80)}}));
  for (const auto cc : {target::ComputeCapability{8, 0}, {8, 6}}) {
    const auto r = check(w, on({cc}));
    EXPECT_TRUE(r.runs()) << all(r.problems());
    ASSERT_EQ(r.objects.size(), 1u);
    EXPECT_EQ(r.objects[0].member, "demo_ext/_C.so");
    EXPECT_EQ(r.objects[0].sass, std::vector<std::string>{"sm_80"});
    EXPECT_TRUE(r.objects[0].ptx.empty());
    EXPECT_TRUE(r.objects[0].notes.empty()) << all(r.objects[0].notes);
  }
  for (const auto& [cc, name] : {std::pair{target::ComputeCapability{9, 0}, "sm90"},
                                 std::pair{target::ComputeCapability{12, 0}, "sm120"}}) {
    const auto r = check(w, on({cc}));
    EXPECT_FALSE(r.runs());
    ASSERT_EQ(r.problems().size(), 1u);
    const std::string p = r.problems()[0];
    EXPECT_NE(p.find("demo_ext/_C.so: no GPU code runs on " + std::string(name)), std::string::npos)
        << p;
    EXPECT_NE(p.find("SASS: sm_80; PTX: none"), std::string::npos) << p;
  }
  // Every arch of a multi-arch target must be covered.
  EXPECT_FALSE(check(w, on({{8, 0}, {9, 0}})).runs());
}

TEST_F(RunCheck, PtxOfALowerArchRunsWithAJitNote) {
  const auto w = wheel(kernel_so({{sass(80), ptx(80)}}), /*deflate=*/false);  // read in place
  const auto r = check(w, on({{9, 0}}));
  EXPECT_TRUE(r.runs()) << all(r.problems());
  ASSERT_EQ(r.objects.size(), 1u);
  EXPECT_EQ(r.objects[0].ptx, std::vector<std::string>{"compute_80 (PTX 8.5)"});
  ASSERT_EQ(r.objects[0].notes.size(), 1u);
  EXPECT_NE(r.objects[0].notes[0].find("sm90 has no SASS: the driver compiles the PTX at first "
                                       "launch (JIT"),
            std::string::npos)
      << r.objects[0].notes[0];
  // PTX of a higher arch does not help.
  EXPECT_FALSE(check(wheel(kernel_so({{sass(80), ptx(100)}})), on({{9, 0}})).runs());
}

TEST_F(RunCheck, ArchSpecificSassRunsOnItsArchOnly) {
  const auto w = wheel(kernel_so({{sass(90, true)}}));
  const auto r = check(w, on({{9, 0}}));
  EXPECT_TRUE(r.runs()) << all(r.problems());
  EXPECT_EQ(r.objects[0].sass, std::vector<std::string>{"sm_90a"});
  // sm_100a does not run on 10.3, sm_100 does.
  EXPECT_FALSE(check(wheel(kernel_so({{sass(100, true)}})), on({{10, 3}})).runs());
  EXPECT_TRUE(check(wheel(kernel_so({{sass(100)}})), on({{10, 3}})).runs());
  // Nor on another major.
  EXPECT_FALSE(check(w, on({{8, 9}})).runs());
  EXPECT_FALSE(check(w, on({{12, 0}})).runs());
}

TEST_F(RunCheck, ACompressedEntryIsReadByItsHeader) {
  FatEntrySpec e = sass(86);
  e.compressed = true;
  const auto w = wheel(kernel_so({{e}}));
  const auto r = check(w, on({{8, 6}}));
  EXPECT_TRUE(r.runs()) << all(r.problems());
  EXPECT_EQ(r.objects[0].sass, std::vector<std::string>{"sm_86"});
  EXPECT_FALSE(check(w, on({{8, 0}})).runs());
  // On 8.9 it runs, but whether it is an sm_86a cannot be read: a note says so.
  const auto r89 = check(w, on({{8, 9}}));
  EXPECT_TRUE(r89.runs());
  ASSERT_EQ(r89.objects[0].notes.size(), 1u);
  EXPECT_NE(r89.objects[0].notes[0].find("compressed SASS"), std::string::npos);
}

TEST_F(RunCheck, EachFatBinaryMustRunOnTheTarget) {
  // Two translation units: one built for sm_90 only does not run on 8.6, though the other does.
  const auto r = check(wheel(kernel_so({{sass(80)}, {sass(90)}})), on({{8, 6}}));
  EXPECT_FALSE(r.runs());
  ASSERT_EQ(r.problems().size(), 1u);
  EXPECT_NE(r.problems()[0].find("in 1 of its 2 fat binaries"), std::string::npos)
      << r.problems()[0];
  EXPECT_EQ(r.objects[0].fatbins, 2u);
}

TEST_F(RunCheck, AWheelWithoutCudaCodePassesWithANote) {
  const auto r =
      check(wheel(build_so("plain", "extern \"C\" int f() { return 2; }\n")), on({{9, 0}}));
  EXPECT_TRUE(r.runs());
  ASSERT_EQ(r.objects.size(), 1u);
  EXPECT_EQ(r.objects[0].fatbins, 0u);
  EXPECT_NE(all(r.notes).find("no CUDA code in its 1 shared objects"), std::string::npos)
      << all(r.notes);
}

TEST_F(RunCheck, AMalformedFatBinaryIsRefusedWithWhy) {
  std::string fat = whfs::test::fatbin_section({{sass(80)}});
  fat[0] = 'X';  // no magic
  const auto r = check(wheel(build_so("bad", "int g() { return 3; }\n", fat)), on({{8, 0}}));
  EXPECT_FALSE(r.runs());
  ASSERT_EQ(r.problems().size(), 1u);
  EXPECT_NE(r.problems()[0].find("not a valid fat binary: at offset 0 of .nv_fatbin, no container "
                                 "magic 0xBA55ED50"),
            std::string::npos)
      << r.problems()[0];
  // A truncated object: its section table lies past its end.
  std::string so = kernel_so({{sass(80)}}, "cut");
  so.resize(so.size() - 200);
  const auto cut = check(wheel(so), on({{8, 0}}));
  ASSERT_EQ(cut.problems().size(), 1u);
  EXPECT_NE(cut.problems()[0].find("not a valid ELF file"), std::string::npos) << cut.problems()[0];
}

TEST_F(RunCheck, TheUncompressedSizeIsBounded) {
  auto members = test::wheel_members("demo_ext", "1.0");
  members.push_back({"demo_ext/big.so", std::string(5000, 'x'), true});
  const auto w = test::write_wheel(dir_.path(), "big-1.0-py3-none-any.whl", members);
  auto f = CheckedFile::open(w);
  ASSERT_TRUE(f);
  LocalZip zip(*f);
  auto entries = zip.directory();
  ASSERT_TRUE(entries);
  const auto it = std::find_if(entries->begin(), entries->end(),
                               [](const auto& e) { return e.name == "demo_ext/big.so"; });
  ASSERT_NE(it, entries->end());
  auto bytes = zip.member(*it, 4096);
  ASSERT_FALSE(bytes);
  EXPECT_EQ(bytes.error(), "demo_ext/big.so is 5000 bytes uncompressed (at most 4096 are read)");
  EXPECT_EQ(kMaxObjectSize, 2ull << 30);
  // Not an ELF file, though named so: a note, not a refusal.
  const auto r = check(w, on({{8, 0}}));
  EXPECT_TRUE(r.runs());
  EXPECT_NE(all(r.notes).find("demo_ext/big.so is not an ELF file: not read"), std::string::npos);
}

// A fake torch: torch/lib/libc10.so defining `defined`, and a second library.
class TorchAbi : public RunCheck {
 protected:
  std::string fake_torch(const std::string& name, const std::string& extra) {
    const std::string lib = path(name + "/torch/lib");
    std::filesystem::create_directories(lib);
    write(name + "_c10.cpp",
          "#include <string>\nnamespace c10 { int present(int x) { return x; }\n" + extra + "}\n");
    sh("g++ -shared -fPIC -o " + lib + "/libc10.so " + name + "_c10.cpp");
    write(name + "_other.cpp", "namespace at { int other() { return 4; } }\n");
    sh("g++ -shared -fPIC -o " + lib + "/libtorch_cpu.so " + name + "_other.cpp");
    return lib;
  }

  // The extension: imports c10::present(int) and c10::missing(std::string const&).
  std::string extension(const std::string& flags = "") {
    return build_so("ext" + std::to_string(++builds_),
                    "#include <string>\nnamespace c10 { int present(int); int missing(const "
                    "std::string&); }\nnamespace at { int other(); }\n"
                    "extern \"C\" int run() { return c10::present(1) + at::other() + "
                    "c10::missing(std::string(\"x\")); }\n",
                    "", flags);
  }
  int builds_ = 0;
};

TEST_F(TorchAbi, AMissingC10SymbolIsRefusedWithItsDemangledName) {
  auto lacking = TorchSymbols::load(fake_torch("t1", ""));
  ASSERT_TRUE(lacking) << lacking.error();
  EXPECT_EQ(lacking->libraries(), 2u);
  EXPECT_EQ(lacking->abi(), CxxAbi::kUnknown);  // nothing of std::string in it
  auto having = TorchSymbols::load(
      fake_torch("t2", "int missing(const std::string& s) { return int(s.size()); }\n"));
  ASSERT_TRUE(having) << having.error();
  EXPECT_EQ(having->abi(), CxxAbi::kCxx11);

  const auto w = wheel(extension());
  RunTarget t = on({{8, 0}});
  t.torch = &*lacking;
  const auto r = check(w, t);
  EXPECT_FALSE(r.runs());
  ASSERT_EQ(r.objects.size(), 1u);
  EXPECT_EQ(r.objects[0].torch_imports, 3u);
  EXPECT_EQ(r.objects[0].missing_count, 1u);
  const std::string want =
      "c10::missing(std::__cxx11::basic_string<char, std::char_traits<char>, "
      "std::allocator<char> > const&)";
  EXPECT_EQ(r.objects[0].missing, std::vector<std::string>{want});
  ASSERT_EQ(r.problems().size(), 1u);
  EXPECT_NE(r.problems()[0].find("1 of its 3 torch symbols are not defined by "), std::string::npos)
      << r.problems()[0];
  EXPECT_NE(r.problems()[0].find(want), std::string::npos);

  t.torch = &*having;
  const auto ok = check(w, t);
  EXPECT_TRUE(ok.runs()) << all(ok.problems());
  EXPECT_EQ(ok.objects[0].abi, "cxx11");
  // Without a torch, nothing is refused and the report says the ABI was not checked.
  const auto unchecked = check(w, on({{8, 0}}));
  EXPECT_TRUE(unchecked.runs());
  EXPECT_NE(all(unchecked.notes).find("the torch ABI is not checked: no torch in this test"),
            std::string::npos);
}

TEST_F(TorchAbi, AnotherCxxAbiIsRefused) {
  auto torch = TorchSymbols::load(
      fake_torch("t3", "int missing(const std::string& s) { return int(s.size()); }\n"));
  ASSERT_TRUE(torch) << torch.error();
  RunTarget t = on({{8, 0}});
  t.torch = &*torch;
  const auto r = check(wheel(extension("-D_GLIBCXX_USE_CXX11_ABI=0")), t);
  EXPECT_FALSE(r.runs());
  EXPECT_EQ(r.objects[0].abi, "old");
  EXPECT_NE(all(r.problems()).find("built with the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0), torch"),
            std::string::npos)
      << all(r.problems());
}

TEST(TorchNamespace, MangledNamesOfC10AtAndTorch) {
  EXPECT_TRUE(in_torch_namespace("_ZN3c1013present_intEi"));
  EXPECT_TRUE(in_torch_namespace("_ZNK2at6Tensor4sizeEl"));
  EXPECT_TRUE(in_torch_namespace("_ZN5torch8autograd4gradEv"));
  EXPECT_TRUE(in_torch_namespace("_ZTVN3c1010TensorImplE"));
  EXPECT_TRUE(in_torch_namespace("_ZTIN3c105ErrorE"));
  EXPECT_FALSE(in_torch_namespace("_ZN3c1x3fooEv"));
  EXPECT_FALSE(in_torch_namespace("_ZN3atx3fooEv"));  // "atx" is another namespace
  EXPECT_FALSE(in_torch_namespace("_ZNSt6vectorIiSaIiEED1Ev"));
  EXPECT_FALSE(in_torch_namespace("c10_plain_c_symbol"));
  EXPECT_EQ(demangle("_ZN3c107presentEi"), "c10::present(int)");
  EXPECT_EQ(demangle("not_mangled"), "not_mangled");
}

class Glibc : public RunCheck {};

TEST_F(Glibc, TheHighestNeededVersionMustNotExceedTheTargets) {
  // A library whose symbol is versioned GLIBC_2.38, as a newer glibc's would be.
  write("v.map", "GLIBC_2.38 { global: new_thing; local: *; };\n");
  write("fakec.c", "int new_thing(void) { return 1; }\n");
  sh("gcc -shared -fPIC -Wl,--version-script=v.map -Wl,-soname,libfakec.so.6 -o libfakec.so "
     "fakec.c");
  write("uses.c", "int new_thing(void);\nint use(void) { return new_thing(); }\n");
  sh("gcc -shared -fPIC -o libuses.so uses.c -L. -lfakec");
  const auto w = wheel(whfs::test::read_file(path("libuses.so")));
  const auto r = check(w, on({{8, 0}}, "2.31"));
  EXPECT_FALSE(r.runs());
  EXPECT_EQ(r.objects[0].glibc, "2.38");
  ASSERT_EQ(r.problems().size(), 1u);
  EXPECT_EQ(r.problems()[0],
            "demo_ext/_C.so: needs GLIBC_2.38 (libfakec.so.6), the target has glibc 2.31");
  EXPECT_TRUE(check(w, on({{8, 0}}, "2.38")).runs());
  EXPECT_TRUE(check(w, on({{8, 0}}, "2.40")).runs());
  EXPECT_FALSE(check(w, on({{8, 0}}, "")).runs());     // noglibc
  EXPECT_FALSE(check(w, on({{8, 0}}, "2.9")).runs());  // 2.9 < 2.38
}

TEST_F(Glibc, ARealGlibcSymbolCounts) {
  // pthread_create is GLIBC_2.34 since glibc moved libpthread into libc (Debian 12: 2.36).
  const auto w = wheel(build_so("threads",
                                "#include <pthread.h>\nextern \"C\" int start(pthread_t* t) {"
                                " return pthread_create(t, nullptr, nullptr, nullptr); }\n"));
  const auto r = check(w, on({{8, 0}}, "2.31"));
  ASSERT_EQ(r.objects.size(), 1u);
  EXPECT_EQ(r.objects[0].glibc, "2.34");
  EXPECT_FALSE(r.runs());
  EXPECT_NE(all(r.problems()).find("needs GLIBC_2.34 (libc.so.6), the target has glibc 2.31"),
            std::string::npos)
      << all(r.problems());
}

TEST(RunFit, Rules) {
  using wheel::FatbinEntry;
  auto entry = [](FatbinEntry::Kind k, int arch, std::optional<bool> a) {
    FatbinEntry e;
    e.kind = k;
    e.arch = arch;
    e.arch_specific = a;
    return e;
  };
  const auto sm = FatbinEntry::Kind::kSass;
  const auto px = FatbinEntry::Kind::kPtx;
  EXPECT_TRUE(fit({entry(sm, 80, false)}, {8, 9}).runs);
  EXPECT_FALSE(fit({entry(sm, 89, false)}, {8, 6}).runs);  // minor above the target's
  EXPECT_FALSE(fit({entry(sm, 86, true)}, {8, 9}).runs);   // 'a' elsewhere
  EXPECT_TRUE(fit({entry(sm, 90, true)}, {9, 0}).runs);
  const auto jit = fit({entry(px, 75, false)}, {12, 0});
  EXPECT_TRUE(jit.runs);
  EXPECT_TRUE(jit.jit);
  EXPECT_FALSE(fit({entry(px, 90, true)}, {10, 0}).runs);  // compute_90a JITs on 9.0 only
  EXPECT_FALSE(fit({}, {8, 0}).runs);
}

}  // namespace
}  // namespace whfs::check
