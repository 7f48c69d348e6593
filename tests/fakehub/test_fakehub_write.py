#!/usr/bin/env python3
"""Self-test of the emulator's write side (hub-write-api.md): preupload, the LFS batch API with
both transfers, the storage host, multipart completion, verify, the ndjson commit, write auth,
upload faults and the request log."""
import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import tempfile
import unittest
from urllib.parse import quote, urlsplit

from fakehub_ctl import FakeHub

REPO = "acme/wheels"
WHEEL = "pkg/demo-1.0+cu128-py3-none-any.whl"
BRANCH_MOVED = "The branch was updated since you opened this page. Please refresh and try again."


def make_tree(root):
    files = {
        ".gitattributes": b"*.whl filter=lfs diff=lfs merge=lfs -text\n",
        ".gitignore": b"*.tmp\nbuild/\n",
        "README.md": b"# wheels\n",
        WHEEL: hashlib.sha256(b"wheel").digest() * 4096,
        "docs/a.txt": b"a\n",
        "docs/b.txt": b"b\n",
    }
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return files


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def request(method, url, headers=None, body=None, timeout=30):
    """One request on a fresh connection: (status, lower-case headers, body bytes)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, u.path + ("?" + u.query if u.query else ""), body=body,
                     headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


class Hub:
    """The write calls a client makes, with a token (or none)."""

    def __init__(self, base, token):
        self.base = base
        self.token = token

    def auth(self, extra=None):
        h = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        h.update(extra or {})
        return h

    def post_json(self, path, obj, ctype="application/json"):
        status, h, data = request("POST", self.base + path, self.auth({"Content-Type": ctype}),
                                  json.dumps(obj).encode())
        return status, h, json.loads(data) if data else None

    def preupload(self, files, repo=REPO, rev="main", **extra):
        body = {"files": [{"path": p, "size": len(d), "sample": base64.b64encode(d[:512]).decode()}
                          for p, d in files.items()], **extra}
        return self.post_json(f"/api/datasets/{repo}/preupload/{quote(rev, safe='')}", body)

    def batch(self, blobs, repo=REPO, transfers=("basic", "multipart"), algo="sha256"):
        body = {"operation": "upload", "transfers": list(transfers), "hash_algo": algo,
                "ref": {"name": "main"},
                "objects": [{"oid": sha256(d), "size": len(d)} for d in blobs]}
        return self.post_json(f"/datasets/{repo}.git/info/lfs/objects/batch", body,
                              "application/vnd.git-lfs+json")

    def commit(self, ops, summary="Upload", repo=REPO, rev="main", parent=None, query=""):
        header = {"summary": summary, "description": ""}
        if parent:
            header["parentCommit"] = parent
        lines = [{"key": "header", "value": header}] + ops
        payload = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        status, h, data = request("POST", f"{self.base}/api/datasets/{repo}/commit/"
                                  f"{quote(rev, safe='')}{query}",
                                  self.auth({"Content-Type": "application/x-ndjson"}), payload)
        return status, h, json.loads(data) if data else None


def file_op(path, data):
    return {"key": "file", "value": {"path": path, "encoding": "base64",
                                     "content": base64.b64encode(data).decode()}}


def lfs_op(path, data):
    return {"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": sha256(data),
                                        "size": len(data)}}


class WriteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fakehub-write-")
        cls.src = os.path.join(cls.tmp, "src")
        cls.files = make_tree(cls.src)
        # acme/pristine never gets commits: tests that read its files can run in any order.
        cls.fh = FakeHub({REPO: cls.src, "acme/other": cls.src, "acme/secret": cls.src + ":private",
                          "acme/gated": cls.src + ":gated", "acme/pristine": cls.src},
                         os.path.join(cls.tmp, "run"),
                         tokens={"hf_read": ["acme/secret"]},
                         write_tokens={"hf_write": [REPO, "acme/secret", "acme/gated", "acme/pristine"],
                                       "hf_other": ["acme/other"]})
        cls.w = Hub(cls.fh.hub, "hf_write")

    @classmethod
    def tearDownClass(cls):
        cls.fh.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def tearDown(self):
        self.fh.clear_faults()
        self.fh.config(multipart_threshold=5 * 10**9, multipart_chunk=64 * 1024 * 1024)

    def head(self, repo=REPO, rev="main"):
        status, _, body = request("GET", f"{self.fh.hub}/api/datasets/{repo}/revision/{rev}")
        return json.loads(body)["sha"] if status == 200 else None

    def upload(self, data, transfers=("basic", "multipart")):
        """The LFS upload as huggingface_hub does it: batch, PUT(s) [+ completion], verify."""
        status, _, body = self.w.batch([data], transfers=transfers)
        self.assertEqual(status, 200, body)
        obj = body["objects"][0]
        if "actions" not in obj:
            return obj
        up = obj["actions"]["upload"]
        header = up.get("header") or {}
        if "chunk_size" in header:
            chunk = int(header["chunk_size"])
            parts = sorted((k for k in header if k.isdigit()), key=int)
            etags = []
            for i, k in enumerate(parts):
                status, h, _ = request("PUT", header[k], body=data[i * chunk:(i + 1) * chunk])
                self.assertEqual(status, 200)
                etags.append({"partNumber": int(k), "etag": h["etag"]})
            status, _, resp = request("POST", up["href"], {"Content-Type": "application/vnd.git-lfs+json"},
                                      json.dumps({"oid": obj["oid"], "parts": etags}).encode())
            self.assertEqual(status, 200, resp)
        else:
            status, _, resp = request("PUT", up["href"], body=data)
            self.assertEqual(status, 200, resp)
        status, _, resp = self.w.post_json(urlsplit(obj["actions"]["verify"]["href"]).path,
                                           {"oid": obj["oid"], "size": len(data)},
                                           "application/vnd.git-lfs+json")
        self.assertEqual(status, 200, resp)
        return obj

    def download(self, path, rev="main"):
        """Bytes of a file through the read routes (following redirects without the token)."""
        url = f"{self.fh.hub}/datasets/{REPO}/resolve/{rev}/{quote(path)}"
        for _ in range(5):
            status, h, body = request("GET", url)
            if status not in (302, 307):
                self.assertEqual(status, 200)
                return body
            loc = h["location"]
            url = loc if loc.startswith("http") else self.fh.hub + loc
        self.fail("too many redirects")

    # ---- preupload ---------------------------------------------------------------------------

    def test_preupload_decides_lfs_ignore_and_reports_oids(self):
        files = {"x/new-2.0-py3-none-any.whl": b"PK\x03\x04 zip",  # *.whl pattern
                 "notes.txt": b"plain text\n", "blob.bin": b"\x00\x01binary",
                 "empty.whl": b"", "README.md": self.files["README.md"],
                 WHEEL: self.files[WHEEL], "a.tmp": b"t", "build/x.txt": b"x"}
        status, h, body = self.w.preupload(files, repo="acme/pristine")
        self.assertEqual(status, 200, body)
        self.assertIn("x-request-id", h)
        self.assertIn("ratelimit", h)
        got = {f["path"]: f for f in body["files"]}
        modes = {p: f["uploadMode"] for p, f in got.items()}
        self.assertEqual(modes, {"x/new-2.0-py3-none-any.whl": "lfs", "notes.txt": "regular",
                                 "blob.bin": "lfs", "empty.whl": "regular", "README.md": "regular",
                                 WHEEL: "lfs", "a.tmp": "regular", "build/x.txt": "regular"})
        self.assertEqual({p for p, f in got.items() if f["shouldIgnore"]}, {"a.tmp", "build/x.txt"})
        self.assertEqual(got["README.md"]["oid"], git_sha1(self.files["README.md"]))
        self.assertEqual(got[WHEEL]["oid"], sha256(self.files[WHEEL]))
        self.assertNotIn("oid", got["notes.txt"])

    def test_preupload_size_and_request_gitattributes(self):
        big = {"path": "big.txt", "size": 10 * 1024 * 1024, "sample": base64.b64encode(b"text").decode()}
        status, _, body = self.w.post_json(f"/api/datasets/{REPO}/preupload/main",
                                           {"files": [big], "gitAttributes": "*.txt filter=lfs\n"})
        self.assertEqual(body["files"][0]["uploadMode"], "lfs")
        status, _, body = self.w.post_json(f"/api/datasets/{REPO}/preupload/main",
                                           {"files": [dict(big, size=100)],
                                            "gitAttributes": "*.txt filter=lfs\n"})
        self.assertEqual(body["files"][0]["uploadMode"], "lfs")
        status, _, body = self.w.post_json(f"/api/datasets/{REPO}/preupload/main",
                                           {"files": [dict(big, size=100)]})
        self.assertEqual(body["files"][0]["uploadMode"], "regular")

    # ---- auth ----------------------------------------------------------------------------------

    def test_write_auth_matrix(self):
        f = {"a.txt": b"a"}
        cases = [  # (token, repo, status, X-Error-Code, message)
            (None, REPO, 401, None, "Invalid username or password."),
            ("hf_read", REPO, 403, None, "you must use a write token to upload to a repository"),
            ("hf_other", REPO, 403, None, None),
            ("hf_nope", REPO, 401, None, "Invalid credentials in Authorization header"),
            ("hf_other", "acme/secret", 404, "RepoNotFound", None),
            (None, "acme/secret", 401, None, "Invalid username or password."),
            ("hf_write", "acme/missing", 404, "RepoNotFound", None),
            ("hf_other", "acme/gated", 403, "GatedRepo", None),
        ]
        for token, repo, want, code, msg in cases:
            for call in ("preupload", "batch", "commit"):
                c = Hub(self.fh.hub, token)
                if call == "preupload":
                    status, h, _ = c.preupload(f, repo=repo)
                elif call == "batch":
                    status, h, _ = c.batch([b"a"], repo=repo)
                else:
                    status, h, _ = c.commit([file_op("a.txt", b"a")], repo=repo)
                where = (token, repo, call)
                self.assertEqual(status, want, where)
                self.assertEqual(h.get("x-error-code"), code, where)
                if msg:
                    self.assertEqual(h.get("x-error-message"), msg, where)
                self.assertIn("x-request-id", h)
        status, h, _ = self.w.preupload(f, rev="nope")
        self.assertEqual((status, h["x-error-code"], h["x-error-message"]),
                         (404, "RevisionNotFound", "Invalid rev id: nope"))
        self.assertEqual(self.w.preupload(f, repo="acme/secret")[0], 200)
        self.assertEqual(Hub(self.fh.hub, "hf_other").preupload(f, repo="acme/other")[0], 200)

    # ---- uploads and commits -------------------------------------------------------------------

    def test_basic_upload_and_commit_is_visible_everywhere(self):
        old = self.head()
        wheel = os.urandom(300_000)
        obj = self.upload(wheel)
        self.assertTrue(urlsplit(obj["actions"]["upload"]["href"]).netloc
                        == urlsplit(self.fh.cdn).netloc)
        self.assertNotIn("header", obj["actions"]["upload"])
        text = b"hello\n"
        status, h, body = self.w.commit([lfs_op("new/x-1-py3-none-any.whl", wheel),
                                         file_op("new/hello.txt", text)],
                                        summary="Add x", parent=old)
        self.assertEqual(status, 200, body)
        sha = body["commitOid"]
        self.assertEqual(body["commitUrl"], f"{self.fh.hub}/datasets/{REPO}/commit/{sha}")
        self.assertTrue(body["success"])
        self.assertNotIn("pullRequestUrl", body)
        self.assertEqual(self.head(), sha)
        status, _, tree = request("GET", f"{self.fh.hub}/api/datasets/{REPO}/tree/{sha}/new")
        entries = {e["path"]: e for e in json.loads(tree)}
        self.assertEqual(entries["new/x-1-py3-none-any.whl"]["lfs"]["oid"], sha256(wheel))
        self.assertEqual(entries["new/hello.txt"]["oid"], git_sha1(text))
        self.assertEqual(self.download("new/x-1-py3-none-any.whl"), wheel)
        self.assertEqual(self.download("new/hello.txt"), text)
        self.assertEqual(request("GET", f"{self.fh.hub}/api/datasets/{REPO}/tree/{old}/new")[0], 404)
        # Uploading it again: the object is there, so no actions.
        status, _, body = self.w.batch([wheel])
        self.assertNotIn("actions", body["objects"][0])

    def test_multipart_upload(self):
        self.fh.config(multipart_threshold=100_000, multipart_chunk=64 * 1024)
        data = os.urandom(200_000)
        status, _, body = self.w.batch([data])
        self.assertEqual(body["transfer"], "multipart")
        header = body["objects"][0]["actions"]["upload"]["header"]
        self.assertEqual(header["chunk_size"], str(64 * 1024))
        self.assertEqual(sorted(k for k in header if k.isdigit()), ["00001", "00002", "00003", "00004"])
        href = body["objects"][0]["actions"]["upload"]["href"]
        self.assertTrue(href.startswith(self.fh.hub + "/api/complete_multipart?uploadId="), href)
        # basic only when the client does not offer multipart
        status, _, basic = self.w.batch([data], transfers=("basic",))
        self.assertNotIn("header", basic["objects"][0]["actions"]["upload"])
        self.upload(data)
        status, _, body = self.w.commit([lfs_op("mp/big.whl", data)])
        self.assertEqual(status, 200, body)
        self.assertEqual(self.download("mp/big.whl"), data)

    def test_multipart_completion_checks_parts(self):
        self.fh.config(multipart_threshold=1000, multipart_chunk=1000)
        data = os.urandom(2500)
        _, _, body = self.w.batch([data])
        up = body["objects"][0]["actions"]["upload"]
        etags = []
        for i, k in enumerate(["00001", "00002", "00003"]):
            piece = data[i * 1000:(i + 1) * 1000]
            status, h, _ = request("PUT", up["header"][k], body=piece)
            self.assertEqual(h["etag"], f'"{hashlib.md5(piece).hexdigest()}"')
            etags.append({"partNumber": i + 1, "etag": h["etag"]})

        def complete(parts, oid=sha256(data)):
            return request("POST", up["href"], {"Content-Type": "application/vnd.git-lfs+json"},
                           json.dumps({"oid": oid, "parts": parts}).encode())
        self.assertEqual(complete(etags[:2])[0], 400)
        self.assertEqual(complete([etags[0], etags[1], dict(etags[2], etag='"0"')])[0], 400)
        self.assertEqual(complete(etags, oid="0" * 64)[0], 400)
        forged = re.sub(r"signature=[^&]+", "signature=x", up["href"])
        self.assertEqual(request("POST", forged, {}, json.dumps({"oid": sha256(data),
                                                                   "parts": etags}).encode())[0], 403)
        self.assertEqual(complete(etags)[0], 200)

    def test_multipart_resume_resends_only_the_failed_part(self):
        self.fh.config(multipart_threshold=1000, multipart_chunk=100_000)
        data = os.urandom(250_000)
        _, _, body = self.w.batch([data])
        up = body["objects"][0]["actions"]["upload"]
        urls = [up["header"][k] for k in ("00001", "00002", "00003")]
        self.fh.fault(kind="reset", server="cdn", method="PUT", path="^/lfs-upload/",
                      after_bytes=50_000, count=1)
        etags = {}
        for i, url in enumerate(urls):
            try:
                status, h, _ = request("PUT", url, body=data[i * 100_000:(i + 1) * 100_000])
                etags[i + 1] = h["etag"]
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                pass
        self.assertEqual(sorted(etags), [2, 3])  # part 1 was cut
        status, h, _ = request("PUT", urls[0], body=data[:100_000])
        etags[1] = h["etag"]
        parts = [{"partNumber": n, "etag": etags[n]} for n in (1, 2, 3)]
        status, _, _ = request("POST", up["href"], {"Content-Type": "application/vnd.git-lfs+json"},
                               json.dumps({"oid": sha256(data), "parts": parts}).encode())
        self.assertEqual(status, 200)
        self.assertNotIn("actions", self.w.batch([data])[2]["objects"][0])

    def test_wrong_bytes_are_refused_and_never_committable(self):
        data = os.urandom(5000)
        _, _, body = self.w.batch([data])
        href = body["objects"][0]["actions"]["upload"]["href"]
        status, h, resp = request("PUT", href, body=data[:-1] + b"!")
        self.assertEqual(status, 400)
        self.assertIn(b"<Code>BadDigest</Code>", resp)
        status, _, _ = request("PUT", href, body=data[:-1])
        self.assertEqual(status, 400)
        before = self.head()
        status, h, _ = self.w.commit([file_op("ok.txt", b"fine"), lfs_op("never.whl", data)])
        self.assertEqual(status, 400)
        self.assertIn("LFS pointer pointed to a file that does not exist", h["x-error-message"])
        self.assertEqual(self.head(), before)  # atomic: ok.txt did not land either
        status, _, _ = self.w.post_json(f"/datasets/{REPO}.git/info/lfs/objects/verify",
                                        {"oid": sha256(data), "size": len(data)})
        self.assertEqual(status, 404)

    def test_objects_belong_to_their_repo(self):
        data = os.urandom(1000)
        self.upload(data)
        other = Hub(self.fh.hub, "hf_other")
        status, _, body = other.batch([data], repo="acme/other")
        self.assertIn("actions", body["objects"][0])  # not there yet for acme/other
        status, _, _ = other.commit([lfs_op("x.whl", data)], repo="acme/other")
        self.assertEqual(status, 400)

    def test_parent_commit_and_branch_moved(self):
        head = self.head()
        status, _, body = self.w.commit([file_op("p1.txt", b"1")], parent=head)
        self.assertEqual(status, 200)
        status, h, body = self.w.commit([file_op("p2.txt", b"2")], parent=head)
        self.assertEqual((status, h["x-error-message"], body["error"]), (412, BRANCH_MOVED, BRANCH_MOVED))
        # The fault moves the branch just before the commit: a stale parent once, then fine.
        head = self.head()
        self.fh.fault(kind="branch_moved", count=1, path="/commit/")
        status, _, _ = self.w.commit([file_op("p3.txt", b"3")], parent=head)
        self.assertEqual(status, 412)
        moved = self.head()
        self.assertNotEqual(moved, head)
        status, _, body = self.w.commit([file_op("p3.txt", b"3")], parent=moved)
        self.assertEqual(status, 200)
        # Without parentCommit the commit lands on top of whatever moved.
        self.fh.fault(kind="branch_moved", count=1, path="/commit/")
        before = self.head()
        status, _, body = self.w.commit([file_op("p4.txt", b"4")])
        self.assertEqual(status, 200)
        self.assertNotEqual(body["commitOid"], before)
        # A forced 409 through the generic status fault.
        self.fh.fault(kind="status", status=409, count=1, path="/commit/", message="conflict")
        self.assertEqual(self.w.commit([file_op("p5.txt", b"5")])[0], 409)
        self.assertEqual(self.w.commit([file_op("p5.txt", b"5")])[0], 200)

    def test_deletes_and_gitattributes_tracking(self):
        data = os.urandom(2000)
        self.upload(data)
        status, h, _ = self.w.commit([{"key": "deletedFile", "value": {"path": "nope.txt"}}])
        self.assertEqual((status, h["x-error-code"]), (404, "EntryNotFound"))
        self.assertIn("A file with this name doesn't exist", h["x-error-message"])
        status, _, body = self.w.commit([{"key": "deletedFolder", "value": {"path": "docs/"}},
                                         {"key": "deletedFile", "value": {"path": "README.md"}},
                                         lfs_op("bins/tool.bin", data)])
        self.assertEqual(status, 200, body)
        status, _, tree = request("GET", f"{self.fh.hub}/api/datasets/{REPO}/tree/main?recursive=1")
        paths = {e["path"] for e in json.loads(tree)}
        self.assertFalse({"docs", "docs/a.txt", "README.md"} & paths)
        ga = self.download(".gitattributes").decode()
        self.assertTrue(ga.startswith(self.files[".gitattributes"].decode()))
        self.assertIn("bins/tool.bin filter=lfs diff=lfs merge=lfs -text\n", ga)
        self.assertEqual(self.w.commit([file_op("bins/tool.bin/x", b"x")])[0], 400)

    def test_create_pr_and_commit_to_pr(self):
        main = self.head()
        status, _, body = self.w.commit([file_op("pr.txt", b"pr")], query="?create_pr=1")
        self.assertEqual(status, 200, body)
        m = re.match(re.escape(f"{self.fh.hub}/datasets/{REPO}/discussions/") + r"(\d+)$",
                     body["pullRequestUrl"])
        self.assertIsNotNone(m)
        self.assertEqual(self.head(), main)
        rev = quote(f"refs/pr/{m.group(1)}", safe="")
        self.assertEqual(self.head(rev=rev), body["commitOid"])
        status, _, body2 = self.w.commit([file_op("pr2.txt", b"2")], rev=f"refs/pr/{m.group(1)}")
        self.assertEqual(status, 200)
        self.assertEqual(self.head(rev=rev), body2["commitOid"])
        # a read token may open a PR, not push to a branch
        reader = Hub(self.fh.hub, "hf_read")
        self.assertEqual(reader.commit([file_op("r.txt", b"r")], repo="acme/secret",
                                       query="?create_pr=1")[0], 200)
        self.assertEqual(self.w.commit([file_op("t.txt", b"t")], rev="v1.0")[0], 404)

    def test_bad_requests(self):
        bad = [b"", b"not json\n", b'{"key":"file","value":{"path":"a"}}\n',
               b'{"key":"header","value":{"summary":""}}\n']
        for payload in bad:
            status, _, _ = request("POST", f"{self.fh.hub}/api/datasets/{REPO}/commit/main",
                                   self.w.auth({"Content-Type": "application/x-ndjson"}), payload)
            self.assertEqual(status, 400, payload)
        for path in ("/abs", "a/../b", "a//b", ".git/config"):
            self.assertEqual(self.w.commit([file_op(path, b"x")])[0], 400, path)
        status, h, _ = self.w.commit([file_op("big.txt", b"x" * (10 << 20))])
        self.assertEqual(status, 400)
        self.assertIn("larger than 10 MiB", h["x-error-message"])
        status, _, body = self.w.batch([b"x"], algo="md5")
        self.assertEqual(status, 409)
        status, _, body = self.w.post_json(f"/datasets/{REPO}.git/info/lfs/objects/batch",
                                           {"operation": "upload", "objects": [{"oid": "xyz", "size": 1}]})
        self.assertEqual(body["objects"][0]["error"]["code"], 422)
        status, _, body = self.w.batch([b"x"], algo="sha_256")  # huggingface.js's spelling
        self.assertEqual(status, 200)

    # ---- storage host: auth leak, faults, signatures -------------------------------------------

    def test_storage_refuses_a_token_and_counts_it(self):
        data = os.urandom(100)
        _, _, body = self.w.batch([data])
        href = body["objects"][0]["actions"]["upload"]["href"]
        before = self.fh.state()["counters"].get("cdn_auth_violations", 0)
        self.fh.clear_log()
        status, _, resp = request("PUT", href, {"Authorization": "Bearer hf_write"}, data)
        self.assertEqual(status, 400)
        self.assertIn(b"InvalidArgument", resp)
        self.assertEqual(self.fh.state()["counters"]["cdn_auth_violations"], before + 1)
        entry = [e for e in self.fh.log() if e.get("op") == "storage-put"][-1]
        self.assertEqual((entry["server"], entry["auth"], entry["violation"]),
                         ("cdn", True, "authorization-sent-to-storage"))
        self.assertEqual(request("PUT", href, body=data)[0], 200)

    def test_storage_faults_then_retry_succeeds(self):
        data = os.urandom(300_000)
        _, _, body = self.w.batch([data])
        href = body["objects"][0]["actions"]["upload"]["href"]
        self.fh.fault(kind="status", status=503, server="cdn", method="PUT", path="^/lfs-upload/",
                      count=2)
        self.assertEqual(request("PUT", href, body=data)[0], 503)
        # a keep-alive connection stays usable after a status fault (the body was read)
        u = urlsplit(href)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("PUT", f"{u.path}?{u.query}", body=data)
        r = conn.getresponse()
        r.read()
        self.assertEqual(r.status, 503)
        conn.request("PUT", f"{u.path}?{u.query}", body=data)
        r = conn.getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        conn.close()

        data = os.urandom(300_000)
        _, _, body = self.w.batch([data])
        href = body["objects"][0]["actions"]["upload"]["href"]
        self.fh.fault(kind="reset", server="cdn", method="PUT", after_bytes=100_000, count=1)
        with self.assertRaises((ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
            request("PUT", href, body=data)
        self.assertEqual(request("PUT", href, body=data)[0], 200)
        self.assertEqual(self.w.commit([lfs_op("retried.whl", data)])[0], 200)
        self.assertEqual(self.download("retried.whl"), data)

    def test_storage_stall_chunked_and_missing_length(self):
        data = os.urandom(50_000)
        _, _, body = self.w.batch([data])
        href = body["objects"][0]["actions"]["upload"]["href"]
        u = urlsplit(href)
        self.fh.fault(kind="stall_body", server="cdn", method="PUT", after_bytes=1000, count=1,
                      seconds=30)
        with self.assertRaises(socket.timeout):
            request("PUT", href, body=data, timeout=1)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)  # no Content-Length
        conn.putrequest("PUT", f"{u.path}?{u.query}")
        conn.endheaders()
        r = conn.getresponse()
        self.assertEqual((r.status, b"MissingContentLength" in r.read()), (411, True))
        conn.close()
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("PUT", f"{u.path}?{u.query}", body=iter([data[:7], data[7:]]),
                     encode_chunked=True)
        r = conn.getresponse()
        r.read()
        conn.close()
        self.assertEqual(r.status, 200)
        status, _, body = self.w.batch([data])
        self.assertNotIn("actions", body["objects"][0])

    def test_storage_signature_and_expiry(self):
        data = os.urandom(100)
        _, _, body = self.w.batch([data])
        href = body["objects"][0]["actions"]["upload"]["href"]
        forged = re.sub(r"X-Amz-Signature=[0-9a-f]+", "X-Amz-Signature=00", href)
        self.assertEqual(request("PUT", forged, body=data)[0], 403)
        self.fh.ctl("/expire-urls")
        status, _, resp = request("PUT", href, body=data)
        self.assertEqual(status, 403)
        self.assertIn(b"expired", resp)

    def test_request_log_names_each_write_step(self):
        self.fh.clear_log()
        data = os.urandom(1000)
        self.w.preupload({"l.whl": data})
        self.upload(data)
        self.w.commit([lfs_op("l.whl", data)])
        log = sorted(self.fh.log(), key=lambda e: e["start"])
        ops = [(e["server"], e.get("op"), e["auth"], e["status"]) for e in log]
        self.assertEqual(ops, [("hub", "preupload", True, 200), ("hub", "lfs-batch", True, 200),
                               ("cdn", "storage-put", False, 200), ("hub", "lfs-verify", True, 200),
                               ("hub", "commit", True, 200)])
        self.assertEqual(log[2]["bytes_in"], 1000)
        self.assertRegex(log[-1]["commit"], r"^[0-9a-f]{40}$")


if __name__ == "__main__":
    unittest.main()
