// wheelhouse: the command-line companion of wheelhousefs.
//
//   wheelhouse detect [--json|--key] [--mount DIR] [--pid N] [-o arch=..]  where current/ leads
//   wheelhouse doctor [REPO] [--endpoint URL] [--offline] [--mount DIR]...  is this machine ready
//   wheelhouse shell-hook bash|zsh|fish                      the prompt hook (eval it)
//   wheelhouse shell-hook --install|--uninstall [FILE...]    add it to the system's rc files
//   wheelhouse pip-config [--mount DIR] [--append FILE]      pip's keys for current/all/
//   wheelhouse mounts [--json]                           every mount: pid, user, live/stopped/dead
//   wheelhouse status [MOUNTPOINT] [--json] [--watch]    a running mount, live
//   wheelhouse refresh|stop [MOUNTPOINT]                 SIGHUP, or unmount, one mount's daemon
//   wheelhouse cache stats|ls|verify|evict|clear          the block cache (--cache-dir DIR,
//                                                          --cache-group GROUP)
//   wheelhouse prefetch [--mount DIR] [--target KEY] [--current PKG]... PATH...   warm it
//   wheelhouse hashes [--mount DIR] [--current | --target KEY] [PKG...]  pinned requirements
//   wheelhouse check [--target auto|KEY] [--torch DIR] [--json] WHEEL...  will they run there
//   wheelhouse publish [REPO] [--target auto|KEY] [--dry-run] [--replace] [--force] WHEEL...
//                                                          check, then upload
//
// A command that needs a mount takes --mount DIR (the mount's folder or a path in it), else uses
// the only wheelhouse mount; it refuses (2) when there are several, and (3) when there is none.
//
// Exit codes: 0 ok; 1 failure; 2 bad usage; 3 not a wheelhouse mount (or none), or a cache this
// version cannot read; 4 `cache verify` found and dropped corrupt contents; publish (and
// check): 5 a wheel refused, 6 no token or the Hub refused it, 7 another file at a path, 8 no such
// repo/branch.

#include <sys/xattr.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fs/common/log.h"
#include "fs/common/text.h"
#include "fs/common/version.h"
#include "tools/cli/cli_commands.h"

namespace {

constexpr const char* kExitCodes = R"(Exit status:
  0  ok
  1  failure (the network, the Hub, the cache, a mount; detect: an axis undetermined;
     doctor: a check failed)
  2  usage: an unknown command or option, a bad value; several mounts and none named
  3  not a wheelhouse mount (or no mount at all), or a cache of a format this version
     cannot read
  4  cache verify found and dropped corrupt files
  5  publish, check: a wheel failed its checks or does not run on the target
  6  publish: no token, or the Hub refused it
  7  publish: another file is at a wheel's path (--replace)
  8  publish: no such repository or branch)";

// For an option no command of the line knows: one sentence naming it and, when one is near,
// the option meant ("--mnt" -> "--mount"); "" when every option is known.
std::string unknown_option(CLI::App& app, int argc, char** argv) {
  std::vector<CLI::App*> chain{&app};
  std::string command = "wheelhouse";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (!a.starts_with("-") || a == "-") {
      CLI::App* sub = chain.back()->get_subcommand_ptr(a).get();
      if (sub != nullptr) {
        chain.push_back(sub);
        command += " " + a;
      }
      continue;
    }
    const bool is_long = a.starts_with("--");
    const std::string name = is_long ? a.substr(0, a.find('=')) : a.substr(0, 2);
    bool known = false;
    std::vector<std::string> names;
    for (auto* c : chain) {
      known = known || c->get_option_no_throw(name) != nullptr;
      for (const auto* opt : c->get_options()) {
        for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
      }
    }
    if (known) continue;
    const std::string near = is_long ? whfs::nearest_name(name, names) : "";
    return "unknown option '" + name + "' for `" + command + "`" +
           (near.empty() ? "" : "; did you mean " + near + "?") + " (see " + command + " --help)";
  }
  return "";
}

int run(int argc, char** argv) {
  using namespace whfs::cli;
  CLI::App app{
      "wheelhouse: detect the target, inspect mounts and the cache, prefetch and publish wheels"};
  // Options of a command are taken after its subcommand too (cache stats --mount DIR).
  app.fallthrough();
  app.set_version_flag("-V,--version", std::string("wheelhouse ") + whfs::kVersion);
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  CommonOptions common;
  DetectOptions detect_opts;
  auto* detect = app.add_subcommand(
      "detect",
      "Show the target folder current/ leads this shell to, axis by axis, and why: the mount's "
      "own answer (--mount, the mount the working folder is in, or the only one), else this "
      "machine read as a mount reads it");
  detect->add_flag("--json", common.json, "JSON output");
  detect->add_flag("--key", detect_opts.key_only, "print only the target key");
  detect->add_option("--pid", detect_opts.pid,
                     "another process (root, or its user): what current/ shows it");
  detect
      ->add_option("-o", common.target_options,
                   "python=PATH,cudart=PATH,arch=sm89,torch=2.9,cuda=12.8,python_tag=cp312: read "
                   "this machine with these overrides (no mount asked)")
      ->delimiter(',')
      ->allow_extra_args(false);

  detect->add_option("--mount", detect_opts.mount,
                     "the mount whose current/ to report, its overrides included (default: the "
                     "mount the working folder is in, else the only one; with none, or several "
                     "(which --key refuses), this machine is read as a mount would read it)");

  std::string hook_shell;
  std::vector<std::string> hook_mounts;
  std::vector<std::string> hook_install;
  std::vector<std::string> hook_uninstall;
  auto* hook = app.add_subcommand(
      "shell-hook",
      "Print the prompt hook for eval \"$(wheelhouse shell-hook bash)\"; or, as an admin, add it "
      "to (--install) or take it from (--uninstall) the shells' system-wide rc files");
  auto* hook_shell_opt = hook->add_option("SHELL", hook_shell, "bash, zsh or fish");
  hook->add_option("--mount", hook_mounts,
                   "the mounts to tell (default: every wheelhouse mount); either way only those "
                   "whose daemon runs as root or as the shell's user, or listed in "
                   "/etc/wheelhouse-fs/hint-mounts or $WHEELHOUSE_HINT_MOUNTS, are told "
                   "(wheelhouse-hint --help)")
      ->allow_extra_args(false);
  auto* hook_install_opt =
      hook->add_option("--install", hook_install,
                       "add one line that reads /etc/profile.d/wheelhouse-fs.sh to each FILE "
                       "(default: /etc/bash.bashrc and /etc/zsh/zshrc where they exist), for "
                       "interactive shells that are not login shells; the file is replaced "
                       "atomically, its owner and mode kept; a symbolic link is refused")
          ->expected(0, -1)
          ->type_name("[FILE...]");
  auto* hook_uninstall_opt =
      hook->add_option("--uninstall", hook_uninstall,
                       "remove that exact line from each FILE (same default); other lines stay")
          ->expected(0, -1)
          ->type_name("[FILE...]");
  hook_install_opt->excludes(hook_uninstall_opt)->excludes(hook_shell_opt);
  hook_uninstall_opt->excludes(hook_shell_opt);
  hook->footer(
      "The .deb installs /etc/profile.d/wheelhouse-fs.sh (login shells) and edits no other "
      "package's file: run `wheelhouse shell-hook --install` once as root for every interactive "
      "bash and zsh, and `--uninstall` before removing the package.");

  std::string pip_mount;
  std::string pip_append;
  auto* pip_config = app.add_subcommand(
      "pip-config",
      "Print the pip configuration that finds the wheelhouse's wheels for each venv, or add it "
      "to a pip.conf (--append)");
  pip_config->add_option("--mount", pip_mount, "the wheelhouse mount (default: the only one)");
  pip_config->add_option(
      "--append", pip_append,
      "add find-links (this mount's current/all/, beside the file's other folders) and "
      "prefer-binary = true to [global] of FILE (created if missing), replaced atomically with "
      "its other lines, owner and mode kept; a symbolic link is refused");

  bool mounts_json = false;
  auto* mounts = app.add_subcommand(
      "mounts",
      "List every wheelhouse mount: folder, repository@revision, daemon pid, user, and state "
      "(live; stopped: no answer in 3 s; dead: its daemon is gone)");
  mounts->add_flag("--json", mounts_json, "JSON output");

  std::string refresh_pos;
  std::string refresh_mount;
  int refresh_timeout = 60;
  auto* refresh = app.add_subcommand(
      "refresh",
      "Make one mount look for a new commit now (SIGHUP to its daemon, found from its status and "
      "checked to be it), and wait for what it found");
  auto* refresh_pos_opt = refresh->add_option("MOUNTPOINT", refresh_pos,
                                              "the mount, or a path in it (default: the only one)");
  refresh->add_option("--mount", refresh_mount, "the same as MOUNTPOINT")
      ->excludes(refresh_pos_opt);
  refresh
      ->add_option("--timeout", refresh_timeout,
                   "seconds to wait for the answer (default 60; 0: do not wait)")
      ->check(CLI::Range(0, 3600));

  std::string stop_pos;
  std::string stop_mount;
  int stop_timeout = 30;
  auto* stop = app.add_subcommand(
      "stop",
      "Unmount one mount and wait for its daemon to end (a dead mount is detached); its other "
      "mounts and daemons are not touched");
  auto* stop_pos_opt = stop->add_option("MOUNTPOINT", stop_pos,
                                        "the mount, or a path in it (default: the only one)");
  stop->add_option("--mount", stop_mount, "the same as MOUNTPOINT")->excludes(stop_pos_opt);
  stop->add_option("--timeout", stop_timeout, "seconds to wait for its daemon to end (default 30)")
      ->check(CLI::Range(1, 3600));

  std::string status_mount;
  bool watch = false;
  auto* status = app.add_subcommand(
      "status", "A running mount: transfers in flight, reads, the Hub, the cache, problems");
  std::string status_opt;
  auto* status_pos =
      status->add_option("MOUNTPOINT", status_mount,
                         "the mount, or a path in it (default: the only wheelhouse mount)");
  status->add_option("--mount", status_opt, "the same as MOUNTPOINT")->excludes(status_pos);
  status->add_flag("--json", common.json, "JSON output (with --watch: one line per second)");
  status->add_flag("-w,--watch", watch, "redraw every second, like top (Ctrl-C ends it)");

  auto* cache = app.add_subcommand("cache", "Inspect or maintain the block cache");
  cache->require_subcommand(1);
  cache->add_option("--cache-dir", common.cache_dir, "cache folder (default: the mount's default)");
  cache->add_option("--cache-group", common.cache_group,
                    "the group the cache is shared with (the mount's cache_group=)");
  cache
      ->add_option("--mount", common.mount,
                   "the cache of this wheelhouse mount (its folder and group, as it reports "
                   "them; default: the only mount's, or the one cache of several; with no "
                   "mount, wheelhousefs's default); evict finds it from its paths")
      ->excludes(cache->get_option("--cache-dir"));
  auto* stats = cache->add_subcommand("stats", "Usage, hits, misses, evictions, corruption");
  stats->add_flag("--json", common.json, "JSON output");
  auto* ls = cache->add_subcommand("ls", "Cached contents, least recently used first");
  ls->add_flag("--json", common.json, "JSON output");
  auto* verify =
      cache->add_subcommand("verify", "Re-hash every complete content, drop corrupt ones");
  verify->add_flag("--json", common.json, "JSON output");
  std::vector<std::string> evict_targets;
  auto* evict = cache->add_subcommand("evict", "Drop files (paths in a mount, or content ids)");
  evict->add_option("PATH", evict_targets, "a file in a wheelhouse mount, or sha256:<hex>")
      ->required();
  auto* clear = cache->add_subcommand("clear", "Empty the cache (also one of an unknown format)");
  bool yes = false;
  clear->add_flag("-y,--yes", yes, "do not ask");
  bool force = false;
  clear->add_flag("--force", force,
                  "empty it even while mounts use it (they keep working and download again "
                  "what they read next)");

  PrefetchOptions prefetch_opts;
  auto* prefetch = app.add_subcommand("prefetch", "Warm the cache by reading through a mount");
  prefetch->add_option("--mount", prefetch_opts.mountpoint,
                       "the wheelhouse mount (default: the only one)");
  prefetch
      ->add_option("--current", prefetch_opts.current_packages,
                   "packages of current/ (e.g. flash_attn); with no value: all of current/")
      ->expected(0, -1);
  prefetch
      ->add_option("--target", prefetch_opts.targets,
                   "a target key (see wheelhouse detect --key), repeatable: targets/KEY/, or "
                   "the packages named; for a machine other than this one")
      ->allow_extra_args(false);
  prefetch->add_option("PATH", prefetch_opts.paths,
                       "files or folders in the mount; with --target or --current, a name "
                       "without '/' is a package of those folders (flash_attn)");
  prefetch->add_option("-j,--jobs", prefetch_opts.jobs, "files read at once")
      ->check(CLI::Range(1, 64));

  HashesOptions hashes_opts;
  auto* hashes = app.add_subcommand(
      "hashes", "Requirement lines name==version --hash=sha256:... for --require-hashes");
  hashes->add_option("--mount", hashes_opts.mountpoint,
                     "the wheelhouse mount (default: the only one)");
  bool hashes_current = false;
  auto* hashes_cur = hashes->add_flag("--current", hashes_current,
                                      "the folder current/ leads this shell to (the default)");
  hashes->add_option("--target", hashes_opts.target, "a target key instead of current/")
      ->excludes(hashes_cur);
  hashes->add_option("PKG", hashes_opts.packages, "packages (default: every one)");

  PublishOptions publish_opts;
  auto* publish = app.add_subcommand(
      "publish", "Check wheels built here and upload them to the folder of their target");
  publish
      ->add_option("ARGS", publish_opts.args,
                   "[REPO] WHEEL... (REPO: DoctorPopi/python_wheelhouse)")
      ->required();
  publish->add_option("--revision", publish_opts.revision, "the branch to commit to (main)");
  publish->add_option("--target", publish_opts.target,
                      "auto (this machine's GPU and the torch of --python or of this shell's "
                      "Python) or a key such as sm89-torch2.9-cu128-cp312");
  publish->add_option("--python", publish_opts.python,
                      "--target auto: the Python that will use the wheels");
  publish->add_option("--cudart", publish_opts.cudart,
                      "--target auto: the CUDA runtime to ask (default $WHEELHOUSE_CUDART, then "
                      "the system's)");
  publish->add_flag("--dry-run", publish_opts.dry_run, "check and print the plan; upload nothing");
  publish->add_flag("--replace", publish_opts.replace,
                    "replace a different file already at a wheel's path");
  publish->add_option("--endpoint", publish_opts.endpoint,
                      "the Hub (default $HF_ENDPOINT, else https://huggingface.co)");
  publish->add_option("--token-file", publish_opts.token_file,
                      "default $HF_TOKEN, $HF_TOKEN_PATH, $HF_HOME/token");
  publish
      ->add_option("--stall-timeout", publish_opts.stall_timeout,
                   "seconds without progress before a transfer is retried (60)")
      ->check(CLI::Range(1, 3600));
  publish->add_option("--torch", publish_opts.torch,
                      "the torch folder whose lib/*.so the wheels' torch symbols are checked "
                      "against (default: the target's torch, else this shell's Python's)");
  publish->add_flag("--force", publish_opts.force,
                    "publish wheels that wheelhouse check refuses (the commit says so)");

  CheckOptions check_opts;
  auto* check = app.add_subcommand(
      "check",
      "Whether wheels run on a target: their GPU code (SASS/PTX archs), the torch symbols "
      "they import, the glibc they need");
  check->add_option("WHEEL", check_opts.wheels, "wheels (*.whl)")->required();
  check->add_option("--target", check_opts.target,
                    "auto (this machine's GPU and the torch of --python or of this shell's "
                    "Python) or a key such as sm89-torch2.9-cu128-cp312[-glibc2.31]");
  check->add_option("--python", check_opts.python,
                    "--target auto: the Python that will use the wheels");
  check->add_option("--cudart", check_opts.cudart,
                    "--target auto: the CUDA runtime to ask (default $WHEELHOUSE_CUDART, then "
                    "the system's)");
  check->add_option("--torch", check_opts.torch,
                    "the torch folder (or its lib/) to check torch symbols against (default: "
                    "the target's torch, else this shell's Python's when it is the key's)");
  check->add_flag("--json", check_opts.json, "JSON output");

  DoctorOptions doctor_opts;
  auto* doctor = app.add_subcommand(
      "doctor", "Check this machine: FUSE, the cache, the Hub, the token, GPUs, Python, mounts");
  doctor->add_option("REPO", doctor_opts.repo, "the repository to ask the Hub for");
  doctor->add_option("--endpoint", doctor_opts.endpoint,
                     "the Hub (default $HF_ENDPOINT, else https://huggingface.co)");
  doctor->add_option("--cache-dir", doctor_opts.cache_dir,
                     "the cache folder to check (default: wheelhousefs's)");
  doctor->add_flag("--offline", doctor_opts.offline, "send no request to the Hub");
  doctor
      ->add_option("--mount", doctor_opts.mounts,
                   "check only this mount (repeatable; default: every wheelhouse mount)")
      ->allow_extra_args(false);

  app.footer(kExitCodes);

  // An unknown command is named as such (CLI11 would say "A subcommand is required").
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--log-level") {
      ++i;
      continue;
    }
    if (a.starts_with("-")) continue;
    std::string names;
    bool known = false;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == a;
    }
    if (!known) {
      std::vector<std::string> all;
      for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
        all.push_back(sub->get_name());
      }
      const std::string near = whfs::nearest_name(a, all);
      std::fprintf(stderr, "wheelhouse: unknown command '%s'%s (commands: %s; see --help)\n",
                   a.c_str(), near.empty() ? "" : ("; did you mean " + near + "?").c_str(),
                   names.c_str());
      return kUsage;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      if (const std::string why = unknown_option(app, argc, argv); !why.empty()) {
        std::fprintf(stderr, "wheelhouse: %s\n", why.c_str());
        return kUsage;
      }
    }
    return app.exit(e) == 0 ? 0 : 2;
  }
  whfs::setup_logging(log_level);
  if (*detect) return run_detect(common, detect_opts);
  if (*doctor) return run_doctor(doctor_opts);
  if (*status) return run_status(status_opt.empty() ? status_mount : status_opt, common, watch);
  if (*mounts) return run_mounts(mounts_json);
  if (*refresh) {
    return run_refresh(refresh_mount.empty() ? refresh_pos : refresh_mount, refresh_timeout);
  }
  if (*stop) return run_stop(stop_mount.empty() ? stop_pos : stop_mount, stop_timeout);
  if (*hook) {
    const bool install = hook->count("--install") > 0;
    if (install || hook->count("--uninstall") > 0) {
      if (!hook_mounts.empty()) {
        std::fprintf(stderr, "wheelhouse: shell-hook --mount goes with SHELL, not --%s\n",
                     install ? "install" : "uninstall");
        return kUsage;
      }
      return run_shell_hook_files(install, install ? hook_install : hook_uninstall);
    }
    if (hook_shell.empty()) {
      std::fprintf(stderr,
                   "wheelhouse: shell-hook needs SHELL (bash, zsh, fish), or --install or "
                   "--uninstall\n");
      return kUsage;
    }
    return run_shell_hook(hook_shell, hook_mounts);
  }
  if (*pip_config) return run_pip_config(pip_mount, pip_append);
  if (*hashes) return run_hashes(hashes_opts);
  if (*publish) return run_publish(publish_opts);
  if (*check) return run_check(check_opts);
  if (*prefetch) {
    prefetch_opts.current_given = prefetch->count("--current") > 0;
    return run_prefetch(prefetch_opts);
  }
  if (*cache) {
    if (*stats) return run_cache_stats(common);
    if (*ls) return run_cache_ls(common);
    if (*verify) return run_cache_verify(common);
    if (*evict) return run_cache_evict(common, evict_targets);
    if (*clear) return run_cache_clear(common, yes, force);
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wheelhouse: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "wheelhouse: internal error\n");
  }
  return 1;
}
