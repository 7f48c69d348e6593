// Fuzzes what a caller or a path can put before the target code: target keys (any name looked
// up under targets/), pyvenv.cfg text, a libc image, torch/version.py text, and a process's
// GPU environment. Any crash, sanitizer report or broken invariant is a bug:
//   - an accepted key formats back to a canonical text that parses to the same key, and the
//     key of its target is that key;
//   - a visible-GPU answer never names a device the machine does not have.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fs/targeting/gpu_probe.h"
#include "fs/targeting/key.h"
#include "fs/targeting/python_layout.h"
#include "fs/targeting/target.h"
#include "fs/targeting/torch_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace whfs::target;
  static const HostPlatform kHost{"x86_64", "2.36"};
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (const auto k = parse_key(in, kHost)) {
    const std::string text = format_key(*k, kHost);
    const auto again = parse_key(text, kHost);
    if (!again || !(*again == *k)) std::abort();
    const auto back = key_of(target_of(*k, kHost));
    if (!back || !(*back == *k)) std::abort();
  }
  (void)parse_pyvenv_cfg(in);
  (void)glibc_version_in(in);
  (void)parse_python_name(in);
  (void)parse_torch_version_py(in);
  (void)normalize_arch(in);
  (void)normalize_python_tag(in);

  GpuReport machine;
  machine.api = size % 2 == 0 ? GpuApi::kRuntime : GpuApi::kNvml;
  for (int i = 0; i < 3; ++i) {
    GpuDevice d;
    d.index = i;
    d.major = 8 + i % 2;
    d.minor = i;
    d.pci_bus = 7 - i;
    d.uuid = "GPU-0000000" + std::to_string(i);
    machine.devices.push_back(d);
  }
  const auto cut = in.find('\n');
  GpuEnv env;
  env.cuda_visible_devices = std::string(in.substr(0, cut));
  if (cut != std::string_view::npos) env.nvidia_visible_devices = std::string(in.substr(cut + 1));
  const auto v = visible_gpus(machine, env);
  for (const auto& d : v.devices) {
    if (d.index < 0 || d.index >= 3) std::abort();
  }
  return 0;
}
