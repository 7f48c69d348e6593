"""The emulator's data model: repos, immutable commits (snapshots of a folder), refs.

A commit maps repo paths to FileInfo. Its sha is derived from its content and parent, so the
same folder always gives the same commit id. Old commits stay readable after `main` moves,
exactly as on the Hub, so a client pinned to a sha keeps working.
"""
import fnmatch
import hashlib
import json
import os
import threading
import time

LFS_SIZE_THRESHOLD = 10 * 1024 * 1024  # the Hub refuses plain git blobs above 10 MB
POINTER_TEMPLATE = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"


class FileInfo:
    """One file of a commit. `source` is a path on disk or the bytes themselves."""

    __slots__ = ("path", "size", "sha256", "_git_sha1", "lfs", "source", "pointer_sha1")

    def __init__(self, path, size, sha256, git_sha1, lfs, source):
        self.path = path
        self.size = size
        self.sha256 = sha256
        self._git_sha1 = git_sha1  # None: computed when first needed (LFS files never need it)
        self.lfs = lfs
        self.source = source
        self.pointer_sha1 = None
        if lfs:
            self.pointer_sha1 = git_blob_sha1(self.pointer_text().encode())

    @property
    def git_sha1(self):
        if self._git_sha1 is None:
            self._git_sha1 = hash_file(self.source, self.size)[1] if isinstance(self.source, str) \
                else git_blob_sha1(self.source)
        return self._git_sha1

    def pointer_text(self):
        return POINTER_TEMPLATE.format(oid=self.sha256, size=self.size)

    @property
    def oid(self):
        """The tree API's `oid`: the git blob of the pointer for LFS files."""
        return self.pointer_sha1 if self.lfs else self.git_sha1

    @property
    def etag(self):
        return self.sha256 if self.lfs else self.git_sha1

    def read(self, offset, length):
        if isinstance(self.source, bytes):
            return self.source[offset:offset + length]
        with open(self.source, "rb") as f:
            f.seek(offset)
            return f.read(length)


def git_blob_sha1(data):
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def hash_file(path, size):
    """(sha256, git blob sha1) of a file, in one pass."""
    s256 = hashlib.sha256()
    s1 = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as f:
        while True:
            chunk = f.read(4 << 20)
            if not chunk:
                break
            s256.update(chunk)
            s1.update(chunk)
    return s256.hexdigest(), s1.hexdigest()


class LfsRule:
    """Which files are LFS: `auto` = .gitattributes `filter=lfs` patterns or >= 10 MB."""

    def __init__(self, mode, gitattributes_text=""):
        self.mode = mode
        self.patterns = []
        for line in gitattributes_text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
                self.patterns.append(parts[0])

    def is_lfs(self, path, size):
        if self.mode == "all":
            return size > 0
        if self.mode == "none":
            return False
        if size >= LFS_SIZE_THRESHOLD:
            return True
        base = path.rsplit("/", 1)[-1]
        for pat in self.patterns:
            target = path if "/" in pat else base
            if fnmatch.fnmatchcase(target, pat.lstrip("/")):
                return size > 0
        return False


class Commit:
    def __init__(self, files, parent, title, when):
        self.files = files  # path -> FileInfo
        self.parent = parent
        self.title = title
        self.date = when
        h = hashlib.sha1()
        h.update((parent or "").encode())
        for p in sorted(files):
            h.update(b"%s\0%s\0" % (p.encode(), files[p].etag.encode()))
        self.sha = h.hexdigest()
        self.dirs = self._index_dirs()
        self._tree_oids = None
        self._subtrees = {}
        self.entry_json = {}  # (path, is_dir, expand, xet) -> the tree API's JSON of it
        self._tree_items = {}

    def _index_dirs(self):
        """dir path ("" = root) -> (sorted child dir paths, sorted child file paths)."""
        children = {"": (set(), set())}
        for p in self.files:
            parts = p.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                parent = "/".join(parts[:i - 1])
                children.setdefault(d, (set(), set()))
                children.setdefault(parent, (set(), set()))[0].add(d)
            children.setdefault("/".join(parts[:-1]), (set(), set()))[1].add(p)
        return {d: (sorted(ds, key=str.encode), sorted(fs, key=str.encode))
                for d, (ds, fs) in children.items()}

    def tree_items(self, path, recursive):
        """[(path, is_dir)] of the tree API for folder `path`: folders first, then files, each
        sorted by UTF-8 bytes; memoised (made anew per page, it cost 40 ms a page of a
        100k-entry recursive listing)."""
        key = (path, recursive)
        got = self._tree_items.get(key)
        if got is None:
            dirs, files = self.subtree(path) if recursive else self.dirs[path]
            got = self._tree_items[key] = [(d, True) for d in dirs] + [(f, False) for f in files]
        return got

    def tree_oid(self, d):
        """A stable id of folder d's content (hash of the oids under it, in path order).

        All folders are hashed in one pass on first use: per call it would be O(files) per
        listed folder, which made a page of a 100k-entry recursive listing take 24 s."""
        if self._tree_oids is None:
            hashers = {}
            for p in sorted(self.files):
                parts = p.split("/")
                oid = self.files[p].oid.encode()
                for i in range(len(parts)):
                    d_ = "/".join(parts[:i])
                    h = hashers.get(d_)
                    if h is None:
                        h = hashers[d_] = hashlib.sha1(b"tree\0" + d_.encode())
                    h.update(oid)
            self._tree_oids = {k: h.hexdigest() for k, h in hashers.items()}
        h = self._tree_oids.get(d)
        return h if h is not None else hashlib.sha1(b"tree\0" + d.encode()).hexdigest()

    def subtree(self, path):
        """(dirs, files) under path at any depth, each sorted by UTF-8 bytes; memoised."""
        got = self._subtrees.get(path)
        if got is None:
            dirs, files, todo = [], [], [path]
            while todo:
                sub_dirs, sub_files = self.dirs[todo.pop()]
                dirs.extend(sub_dirs)
                files.extend(sub_files)
                todo.extend(sub_dirs)
            dirs.sort(key=str.encode)
            files.sort(key=str.encode)
            got = self._subtrees[path] = (dirs, files)
        return got

    def iso_date(self):
        return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(self.date))


class Repo:
    """A dataset repo: commits plus refs. Thread-safe for the server's readers."""

    def __init__(self, repo_id, private=False, gated=False, lfs_mode="auto"):
        self.id = repo_id
        self.private = private
        self.gated = gated  # False, "auto" or "manual"
        self.lfs_mode = lfs_mode
        self.lock = threading.Lock()
        self.commits = {}
        self.branches = {}
        self.tags = {}
        self.prs = {}
        self.created = time.time()
        self.internal_id = hashlib.sha1(repo_id.encode()).hexdigest()[:24]

    def add_commit(self, files, title, move_branch="main"):
        with self.lock:
            parent = self.branches.get(move_branch)
            c = Commit(files, parent, title, time.time())
            self.commits[c.sha] = c
            self.branches[move_branch] = c.sha
            return c

    def resolve(self, rev):
        """A revision (branch, tag, sha, HEAD, refs/pr/N, refs/heads/x) -> Commit or None."""
        with self.lock:
            if rev == "HEAD":
                rev = "main"
            if rev.startswith("refs/heads/"):
                return self.commits.get(self.branches.get(rev[len("refs/heads/"):], ""))
            if rev.startswith("refs/tags/"):
                return self.commits.get(self.tags.get(rev[len("refs/tags/"):], ""))
            if rev.startswith("refs/pr/"):
                return self.commits.get(self.prs.get(rev[len("refs/pr/"):], ""))
            for table in (self.branches, self.tags):
                if rev in table:
                    return self.commits[table[rev]]
            return self.commits.get(rev)

    def head(self):
        return self.resolve("main")


def snapshot_dir(root, lfs_mode="auto", manifest=None, hash_cache=None):
    """Index a folder as {repo path: FileInfo}. Hashes come from a generator manifest or a
    (path, size, mtime)-keyed cache when possible, else are computed."""
    root = os.path.abspath(root)
    ga_path = os.path.join(root, ".gitattributes")
    ga_text = open(ga_path, encoding="utf-8").read() if os.path.exists(ga_path) else ""
    rule = LfsRule(lfs_mode, ga_text)
    known = (manifest or {}).get("files", {})
    if isinstance(known, list):  # the shared bench generator writes a list of entries
        known = {e["path"]: e for e in known}
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            st = os.stat(full)
            entry = known.get(rel)
            if entry and entry.get("size") == st.st_size and "sha256" in entry:
                s256, s1 = entry["sha256"], entry.get("git_sha1")
            else:
                key = f"{full}:{st.st_size}:{st.st_mtime_ns}"
                cached = hash_cache.get(key) if hash_cache is not None else None
                if cached:
                    s256, s1 = cached
                else:
                    s256, s1 = hash_file(full, st.st_size)
                    if hash_cache is not None:
                        hash_cache[key] = (s256, s1)
            files[rel] = FileInfo(rel, st.st_size, s256, s1, rule.is_lfs(rel, st.st_size), full)
    return files


def load_manifest_near(root):
    """The generator writes <out>/tree and <out>/manifest.json; use it when present."""
    path = os.path.join(os.path.dirname(os.path.abspath(root)), "manifest.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return None
