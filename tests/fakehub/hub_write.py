"""The write side of the Hub API, as huggingface_hub and huggingface.js use it without Xet
(contract: hub-write-api.md next to this file).

  POST /api/datasets/{ns}/{name}/preupload/{rev}            which files go to LFS
  POST /datasets/{ns}/{name}.git/info/lfs/objects/batch     upload actions (basic | multipart)
  PUT  {cdn}/lfs-upload/{repo}/{oid}[?partNumber&uploadId]  the storage host (no token!)
  POST /api/complete_multipart?uploadId=...&signature=...   joins the parts (no token needed)
  POST /datasets/{ns}/{name}.git/info/lfs/objects/verify    is the object there?
  POST /api/datasets/{ns}/{name}/commit/{rev}               ndjson commit, atomic

hub.py calls route_hub() and route_storage() first thing; fakehub.py calls add_arguments()
and install(). The CDN server doubles as the storage host: another origin than the Hub, so a
client that leaks its token there is caught (400, as S3 answers a request with two auths).
"""
import atexit
import base64
import fnmatch
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import socket
import struct
import tempfile
import threading
import time
from email.utils import formatdate, parsedate_to_datetime
from urllib.parse import urlencode

from httpcore import Body
from repo import LFS_SIZE_THRESHOLD, Commit, FileInfo, LfsRule, git_blob_sha1

OID_RE = re.compile(r"^[0-9a-f]{64}$")
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
LFS_JSON = "application/vnd.git-lfs+json"
READ_ONLY_MESSAGE = "you must use a write token to upload to a repository"  # [O], see the .md
BRANCH_MOVED_MESSAGE = ("The branch was updated since you opened this page. "
                        "Please refresh and try again.")  # [C] huggingface_hub's live tests
MISSING_LFS_MESSAGE = ("Your push was rejected because an LFS pointer pointed to a file that "
                       "does not exist.")  # [U]


# ---- options and state -------------------------------------------------------------------

def add_arguments(p):
    p.add_argument("--write-token", action="append", default=[],
                   help="TOKEN=ID,ID: may read and write those repos ('*' = all)")
    p.add_argument("--upload-dir", default="",
                   help="where uploaded LFS objects are kept (default: a temporary folder)")
    p.add_argument("--multipart-threshold", type=int, default=5 * 10**9,
                   help="LFS objects larger than this get the multipart transfer (bytes)")
    p.add_argument("--multipart-chunk", type=int, default=64 * 1024 * 1024,
                   help="part size of a multipart transfer (bytes)")


def install(state, args):
    """Write tokens join the read table (a write token can read what it writes)."""
    state.write_tokens = {}
    for spec in args.write_token:
        tok, _, ids = spec.partition("=")
        ids = {i for i in ids.split(",") if i}
        state.write_tokens[tok] = ids
        state.tokens[tok] = state.tokens.get(tok, set()) | ids
    state.config["multipart_threshold"] = args.multipart_threshold
    state.config["multipart_chunk"] = args.multipart_chunk
    root = args.upload_dir
    if not root:
        root = tempfile.mkdtemp(prefix="fakehub-uploads-")
        atexit.register(shutil.rmtree, root, True)
    state.uploads = UploadStore(root)


class Stored:
    """An LFS object a repo holds: its bytes on disk (`source`) and size."""

    def __init__(self, source, size):
        self.source = source
        self.size = size


class UploadStore:
    """LFS objects by repo, and multipart uploads in progress. Objects live once on disk
    (content-addressed) but belong to the repos they were uploaded to, as on the Hub, where a
    repo's commit may only point at objects of that repo."""

    def __init__(self, root):
        self.root = root
        for sub in ("objects", "parts", "tmp"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        self.lock = threading.Lock()
        self.objects = {}     # (repo internal id, oid) -> Stored
        self.expected = {}    # (repo internal id, oid) -> size announced in a batch
        self.multipart = {}   # upload id -> dict(repo, oid, size, chunk, parts={n: (path, etag)})
        self.commit_oids = {}  # commit sha -> {oid: FileInfo} of its LFS files (memo)

    def temp_path(self):
        fd, path = tempfile.mkstemp(dir=os.path.join(self.root, "tmp"))
        os.close(fd)
        return path

    def keep(self, repo, oid, tmp_path, size):
        """Move a verified upload into place and record it for `repo`."""
        final = os.path.join(self.root, "objects", oid)
        os.replace(tmp_path, final)
        with self.lock:
            self.objects[(repo.internal_id, oid)] = Stored(final, size)
            self.expected.pop((repo.internal_id, oid), None)

    def lookup(self, repo, oid):
        """The object `oid` of `repo` (uploaded, or an LFS file of any of its commits)."""
        with self.lock:
            got = self.objects.get((repo.internal_id, oid))
        if got is not None:
            return got
        with repo.lock:
            commits = list(repo.commits.values())
        for c in commits:
            oids = self.commit_oids.get(c.sha)
            if oids is None:
                oids = {f.sha256: f for f in c.files.values() if f.lfs}
                self.commit_oids[c.sha] = oids
            if oid in oids:
                return Stored(oids[oid].source, oids[oid].size)
        return None

    def describe(self):
        with self.lock:
            return {"objects": len(self.objects), "multipart": len(self.multipart)}


class WriteError(Exception):
    """An answer to send instead of going on: status, message, X-Error-Code."""

    def __init__(self, status, message, code=None):
        super().__init__(message)
        self.status = status
        self.code = code


# ---- access control ----------------------------------------------------------------------

def writable_repo(h, ns, name, create_pr=False, git=False):
    """The repo, once the token may write it; None when an error has been sent. Reads' rules
    come first (hub.py lookup_repo: 401/404/307/GatedRepo), then the write check. `git`: the
    {name}.git routes, whose case-canonical 307 lookup_repo cannot spell."""
    st = h.server.state
    found = st.find_repo(f"{ns}/{name}")
    if git and found is not None and found.id != f"{ns}/{name}" and (
            not found.private or (h.token and st.token_has_access(h.token, found.id))):
        loc = h.path.replace(f"/{ns}/{name}.git/", f"/{found.id}.git/", 1)
        h.send(307, {"Location": loc}, Body(b"Redirecting to " + loc.encode()))
        return None
    repo, done = h.lookup_repo(ns, name, content=True)
    if done:
        return None
    if h.token is None:  # [U] the same answer as an anonymous read of a private repo
        send_write_error(h, WriteError(401, "Invalid username or password."))
        return None
    writes = st.write_tokens.get(h.token)
    if writes is not None and ("*" in writes or repo.id in writes):
        return repo
    if create_pr:
        return repo  # read access is enough to open a pull request [I]
    if writes is None:
        send_write_error(h, WriteError(403, READ_ONLY_MESSAGE))
    else:  # [U] a write token for other repos
        send_write_error(h, WriteError(403, f"You don't have the rights to write to {repo.id}"))
    return None


def write_target(repo, rev, create_pr):
    """(table, key, commit) that a commit on `rev` moves; with create_pr, key is None (a new
    pull request) and commit is the base. Only branches and PR refs take commits."""
    if create_pr:
        commit = repo.resolve(rev)
        if commit is None:
            raise WriteError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return repo.prs, None, commit
    if rev.startswith("refs/pr/"):
        table, key = repo.prs, rev[len("refs/pr/"):]
    elif rev.startswith("refs/heads/"):
        table, key = repo.branches, rev[len("refs/heads/"):]
    else:
        table, key = repo.branches, rev
    with repo.lock:
        sha = table.get(key)
        if sha is None:  # a tag, a sha or nothing: not something a commit can move [U]
            raise WriteError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return table, key, repo.commits[sha]


def send_write_error(h, e):
    h.log_extra["error"] = str(e)
    h.send_error_json(e.status, str(e), e.code)


def json_body(h):
    try:
        body = json.loads(h.request_body or b"{}")
    except ValueError as e:
        raise WriteError(400, f"Bad request: invalid JSON: {e}")
    if not isinstance(body, dict):
        raise WriteError(400, "Bad request: a JSON object was expected")
    return body


# ---- routing -----------------------------------------------------------------------------

def route_hub(h, method):
    """True when the request was a write route (answered here)."""
    s = h.segments
    api_write = len(s) >= 7 and s[1] == "api" and s[2] == "datasets" \
        and s[5] in ("preupload", "commit")
    lfs = len(s) == 8 and s[1] == "datasets" and s[3].endswith(".git") \
        and s[4:7] == ["info", "lfs", "objects"] and s[7] in ("batch", "verify")
    complete = len(s) == 3 and s[1] == "api" and s[2] == "complete_multipart"
    if not (api_write or lfs or complete):
        return False
    h.log_extra["op"] = "complete-multipart" if complete else (f"lfs-{s[7]}" if lfs else s[5])
    if method != "POST":
        h.send_error_json(405, "Method not allowed")
        return True
    try:
        if complete:
            complete_multipart(h)
        elif lfs and s[7] == "batch":
            lfs_batch(h, s[2], s[3][:-len(".git")])
        elif lfs:
            lfs_verify(h, s[2], s[3][:-len(".git")])
        else:
            # The revision is one segment (refs%2Fpr%2F1); an unencoded one is joined back.
            rev = "/".join(s[6:])
            create_pr = (h.q("create_pr") or "") in ("1", "true", "True")
            (preupload if s[5] == "preupload" else commit)(h, s[3], s[4], rev, create_pr)
    except WriteError as e:
        send_write_error(h, e)
    return True


# ---- preupload -----------------------------------------------------------------------------

def read_text(commit, path):
    f = commit.files.get(path)
    return f.read(0, f.size).decode("utf-8", "replace") if f is not None else ""


def gitignore_matches(patterns, path):
    """A small .gitignore: '#' comments, '!' negation, 'dir/' folders, anchored patterns."""
    ignored = False
    parts = path.split("/")
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat[1:] if neg else pat
        dir_only = pat.endswith("/")
        pat = pat.strip("/")
        if not pat:
            continue
        if "/" in pat:  # anchored at the root
            cands = ["/".join(parts[:i]) for i in range(1, len(parts) + (0 if dir_only else 1))]
        else:
            cands = parts[:-1] if dir_only else parts
        if any(fnmatch.fnmatchcase(c, pat) for c in cands):
            ignored = not neg
    return ignored


def preupload(h, ns, name, rev, create_pr):
    repo = writable_repo(h, ns, name, create_pr)
    if repo is None:
        return
    _, _, commit = write_target(repo, rev, create_pr)
    body = json_body(h)
    files = body.get("files")
    if not isinstance(files, list):
        raise WriteError(400, "Bad request: files must be a list")
    ga = body.get("gitAttributes")
    rule = LfsRule(repo.lfs_mode, ga if isinstance(ga, str) else read_text(commit, ".gitattributes"))
    gi = body.get("gitIgnore")
    gi = gi if isinstance(gi, str) else read_text(commit, ".gitignore")
    ignore = [ln.strip() for ln in gi.splitlines() if ln.strip() and not ln.startswith("#")]
    out = []
    for f in files:
        try:
            path, size = f["path"], int(f["size"])
            sample = base64.b64decode(f.get("sample") or "", validate=True)
        except (KeyError, TypeError, ValueError) as e:
            raise WriteError(400, f"Bad request: invalid file entry: {e}")
        # LFS: a .gitattributes filter=lfs pattern, >= 10 MB, or binary (a NUL in the sample,
        # git's own test); repos emulated with --lfs all/none keep that rule.
        lfs = rule.is_lfs(path, size) or (repo.lfs_mode == "auto" and size > 0 and b"\0" in sample)
        entry = {"path": path, "uploadMode": "lfs" if lfs else "regular",
                 "shouldIgnore": gitignore_matches(ignore, path)}
        old = commit.files.get(path)
        if old is not None:  # what the client compares its local oid with
            entry["oid"] = old.sha256 if old.lfs else old.git_sha1
        out.append(entry)
    h.send_json(200, {"files": out})


# ---- the LFS batch API -------------------------------------------------------------------

def lfs_batch(h, ns, name):
    repo = writable_repo(h, ns, name, git=True)
    if repo is None:
        return
    body = json_body(h)
    if body.get("operation") != "upload":
        raise WriteError(400, "fakehub emulates the upload operation only")
    # huggingface_hub sends sha256, huggingface.js sha_256; git-lfs' answer to others is 409.
    if body.get("hash_algo", "sha256") not in ("sha256", "sha_256"):
        raise WriteError(409, f"Unsupported hash algorithm: {body.get('hash_algo')}")
    transfers = body.get("transfers") or ["basic"]
    objects = body.get("objects")
    if not isinstance(objects, list):
        raise WriteError(400, "Bad request: objects must be a list")
    out, multipart = [], False
    for obj in objects:
        entry = batch_object(h, repo, obj, transfers)
        multipart |= "chunk_size" in entry.get("actions", {}).get("upload", {}).get("header", {})
        out.append(entry)
    h.log_extra["oids"] = [o.get("oid") for o in out]
    h.log_extra["transfers"] = transfers
    data = json.dumps({"transfer": "multipart" if multipart else "basic", "objects": out,
                       "hash_algo": "sha256"}).encode()
    h.send(200, {"Content-Type": LFS_JSON}, Body(data))


def batch_object(h, repo, obj, transfers):
    """One object's answer: nothing to do, upload actions, or a per-object error."""
    st = h.server.state
    oid, size = (obj.get("oid"), obj.get("size")) if isinstance(obj, dict) else (None, None)
    if not isinstance(oid, str) or not OID_RE.match(oid) or not isinstance(size, int) or size < 0:
        return {"oid": str(oid), "size": size if isinstance(size, int) else 0,
                "error": {"code": 422, "message": "Invalid object: oid must be 64 lowercase hex "
                                                  "digits and size a non-negative integer"}}
    have = st.uploads.lookup(repo, oid)
    if have is not None:
        if have.size != size:
            return {"oid": oid, "size": size,
                    "error": {"code": 422, "message": f"Size mismatch: stored {have.size}"}}
        return {"oid": oid, "size": size}  # already there: no actions, nothing to upload
    with st.uploads.lock:
        st.uploads.expected[(repo.internal_id, oid)] = size
    verify = {"href": f"{st.hub_base}/datasets/{repo.id}.git/info/lfs/objects/verify"}
    ttl = int(st.config["url_ttl"])
    path = f"/lfs-upload/{repo.internal_id}/{oid}"
    if "multipart" in transfers and size > int(st.config["multipart_threshold"]):
        chunk = int(st.config["multipart_chunk"])
        upload_id = secrets.token_hex(16)
        with st.uploads.lock:
            st.uploads.multipart[upload_id] = {"repo": repo.internal_id, "oid": oid, "size": size,
                                               "chunk": chunk, "parts": {}}
        header = {"chunk_size": str(chunk)}
        for n in range(1, math.ceil(size / chunk) + 1):
            header[f"{n:05d}"] = storage_url(st, path, [("partNumber", str(n)),
                                                        ("uploadId", upload_id)])
        upload = {"href": completion_url(st, upload_id, repo), "header": header,
                  "expires_in": ttl}
    else:
        upload = {"href": storage_url(st, path, []), "expires_in": ttl}
    return {"oid": oid, "size": size, "authenticated": True,
            "actions": {"upload": upload, "verify": verify}}


def storage_url(st, path, params):
    """A presigned-URL look-alike on the storage host; the signature covers path + params."""
    from hub import sign  # hub imports this module: import at call time
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    ttl = int(st.config["url_ttl"])
    sig = sign(st.secret, signed_resource(path, dict(params)), amz_date, ttl, st.url_generation)
    q = params + [("x-id", "UploadPart" if params else "PutObject"),
                  ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
                  ("X-Amz-Credential", f"FAKEHUB/{amz_date[:8]}/us-east-1/s3/aws4_request"),
                  ("X-Amz-Date", amz_date), ("X-Amz-Expires", str(ttl)),
                  ("X-Amz-Signature", sig), ("X-Amz-SignedHeaders", "host")]
    return f"{st.cdn_base}{path}?{urlencode(q)}"


def signed_resource(path, q):
    return f"{path}|{q.get('partNumber', '')}|{q.get('uploadId', '')}"


def completion_url(st, upload_id, repo):
    """The Hub's completion endpoint, signed so that no token is needed (clients send none)."""
    expiration = formatdate(time.time() + int(st.config["url_ttl"]), usegmt=True)
    q = [("uploadId", upload_id), ("bucket", "fakehub-lfs"),
         ("prefix", f"repos/{repo.internal_id}"), ("expiration", expiration),
         ("signature", completion_signature(st, upload_id, expiration))]
    return f"{st.hub_base}/api/complete_multipart?{urlencode(q)}"


def completion_signature(st, upload_id, expiration):
    from hub import sign
    return sign(st.secret, f"/api/complete_multipart|{upload_id}", expiration, 0, st.url_generation)


def complete_multipart(h):
    st = h.server.state
    q = dict(h.query)
    upload_id, expiration = q.get("uploadId", ""), q.get("expiration", "")
    try:
        expired = parsedate_to_datetime(expiration).timestamp() < time.time()
    except (TypeError, ValueError):
        raise WriteError(403, "Missing or malformed signature parameters")
    if q.get("signature") != completion_signature(st, upload_id, expiration):
        raise WriteError(403, "Invalid signature")
    if expired:
        raise WriteError(403, "Request has expired")
    with st.uploads.lock:
        up = st.uploads.multipart.get(upload_id)
    if up is None:
        raise WriteError(404, "The specified multipart upload does not exist", "NoSuchUpload")
    body = json_body(h)
    h.log_extra["oid"] = up["oid"]
    if body.get("oid") != up["oid"]:
        raise WriteError(400, f"oid {body.get('oid')} does not match the upload's {up['oid']}")
    paths = checked_parts(up, body.get("parts"))
    tmp = st.uploads.temp_path()
    sha, size = hashlib.sha256(), 0
    with open(tmp, "wb") as out:
        for p in paths:
            with open(p, "rb") as f:
                while True:
                    data = f.read(1 << 20)
                    if not data:
                        break
                    sha.update(data)
                    size += len(data)
                    out.write(data)
    if sha.hexdigest() != up["oid"] or size != up["size"]:
        os.unlink(tmp)
        raise WriteError(400, f"The uploaded parts do not match the object: sha256 "
                              f"{sha.hexdigest()}, size {size}; expected {up['oid']}, {up['size']}")
    repo = find_repo_by_internal_id(st, up["repo"])
    st.uploads.keep(repo, up["oid"], tmp, size)
    with st.uploads.lock:
        st.uploads.multipart.pop(upload_id, None)
    shutil.rmtree(os.path.join(st.uploads.root, "parts", upload_id), ignore_errors=True)
    st.count("lfs_objects_stored")
    h.send_json(200, {"success": True})  # [U] the body; both clients only look at the status


def checked_parts(up, parts):
    """The part files in order, once the list names each part once with the ETag it got."""
    n_parts = math.ceil(up["size"] / up["chunk"])
    if not isinstance(parts, list) or len(parts) != n_parts:
        raise WriteError(400, f"Expected {n_parts} parts", "InvalidPart")
    paths = []
    for i, p in enumerate(sorted(parts, key=lambda p: p.get("partNumber", 0)
                                 if isinstance(p, dict) else 0), 1):
        got = up["parts"].get(p.get("partNumber")) if isinstance(p, dict) else None
        if got is None or p.get("partNumber") != i:
            raise WriteError(400, f"Part {i} was not uploaded", "InvalidPart")
        if str(p.get("etag", "")).strip('"') != got[1].strip('"'):
            raise WriteError(400, f"Part {i}: the ETag does not match", "InvalidPart")
        want = up["chunk"] if i < n_parts else up["size"] - up["chunk"] * (n_parts - 1)
        if os.path.getsize(got[0]) != want:
            raise WriteError(400, f"Part {i} has {os.path.getsize(got[0])} bytes, not {want}",
                             "InvalidPart")
        paths.append(got[0])
    return paths


def lfs_verify(h, ns, name):
    st = h.server.state
    repo = writable_repo(h, ns, name, git=True)
    if repo is None:
        return
    body = json_body(h)
    oid, size = body.get("oid"), body.get("size")
    h.log_extra["oid"] = oid
    have = st.uploads.lookup(repo, oid) if isinstance(oid, str) else None
    if have is None:
        raise WriteError(404, f"Object {oid} not found")
    if have.size != size:
        raise WriteError(422, f"Object {oid} has size {have.size}, not {size}")
    h.send(200, {"Content-Type": LFS_JSON}, Body(b"{}"))


def find_repo_by_internal_id(st, internal_id):
    for r in list(st.repos.values()):
        if r.internal_id == internal_id:
            return r
    return None


# ---- the storage host (PUTs of objects and parts) ------------------------------------------

def route_storage(h, method):
    """True when the request was for /lfs-upload/ on the CDN server (answered here)."""
    s = h.segments
    if len(s) < 2 or s[1] != "lfs-upload":
        return False
    st = h.server.state
    q = dict(h.query)
    part = q.get("partNumber")
    h.log_extra["op"] = "storage-part" if part else "storage-put"
    try:
        if h.has_auth:
            # The token must never leave the Hub: count it, and fail the way S3 does when a
            # presigned URL also carries an Authorization header.
            st.count("cdn_auth_violations")
            h.log_extra["violation"] = "authorization-sent-to-storage"
            raise WriteError(400, "Only one auth mechanism allowed; only the X-Amz-Algorithm "
                                  "query parameter, Signature query string parameter or the "
                                  "Authorization header should be specified", "InvalidArgument")
        if method != "PUT":
            raise WriteError(405, "The specified method is not allowed against this resource.",
                             "MethodNotAllowed")
        if len(s) != 4 or not OID_RE.match(s[3]):
            raise WriteError(404, "The specified key does not exist.", "NoSuchKey")
        verdict = st.check_signature(signed_resource(h.decoded_path, q), q)
        if verdict is not None:
            raise WriteError(403, verdict, "AccessDenied")
        repo = find_repo_by_internal_id(st, s[2])
        if repo is None:
            raise WriteError(404, "The specified bucket does not exist", "NoSuchBucket")
        if part:
            put_part(h, repo, s[3], part, q.get("uploadId", ""))
        else:
            put_object(h, repo, s[3])
    except WriteError as e:
        if h.body_pending and not h.close_connection:
            for _ in h.iter_request_body():
                pass  # read the body first, so the client gets the answer, not a reset
        h.log_extra["error"] = str(e)
        send_s3_error(h, e)
    return True


def send_s3_error(h, e):
    xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{e.code}</Code>"
           f"<Message>{e}</Message><RequestId>{secrets.token_hex(8).upper()}</RequestId></Error>")
    h.send(e.status, {"Content-Type": "application/xml"}, Body(xml.encode()))


def receive_body(h, dest):
    """Write the request body to `dest`; (sha256 hex, md5 hex, size), or None when a fault
    (reset / stall_body after `after_bytes`) has taken the connection instead."""
    st = h.server.state
    if "chunked" not in (h.headers.get("Transfer-Encoding") or "").lower() \
            and h.headers.get("Content-Length") is None:
        raise WriteError(411, "You must provide the Content-Length HTTP header.",
                         "MissingContentLength")
    fault = st.faults.take(h.server.kind, h.method, h.decoded_path, ("reset", "stall_body"))
    sha, md5, size = hashlib.sha256(), hashlib.md5(), 0
    with open(dest, "wb") as out:
        for data in h.iter_request_body():
            if fault and size + len(data) >= fault.after_bytes:
                data = data[:fault.after_bytes - size]
            sha.update(data)
            md5.update(data)
            out.write(data)
            size += len(data)
            if fault and size >= fault.after_bytes:
                break
    h.log_extra["bytes_in"] = size
    if fault:
        h.fault_used = fault.kind
        h.close_connection = True
        if fault.kind == "stall_body":
            h._stall(fault.seconds)
        else:  # SO_LINGER with a zero timeout turns close() into a TCP RST
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
        return None
    return sha.hexdigest(), md5.hexdigest(), size


def put_object(h, repo, oid):
    """The basic transfer: one PUT of the whole object, checked against its oid and size."""
    st = h.server.state
    tmp = st.uploads.temp_path()
    try:
        got = receive_body(h, tmp)
        if got is None:
            return
        sha, md5, size = got
        with st.uploads.lock:
            want_size = st.uploads.expected.get((repo.internal_id, oid), size)
        if sha != oid or size != want_size:
            raise WriteError(400, f"The content does not match the object: sha256 {sha}, size "
                                  f"{size}; expected {oid}, {want_size}", "BadDigest")
        st.uploads.keep(repo, oid, tmp, size)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    st.count("lfs_objects_stored")
    h.send(200, {"ETag": f'"{md5}"', "x-amz-request-id": secrets.token_hex(8).upper()})


def put_part(h, repo, oid, part, upload_id):
    st = h.server.state
    with st.uploads.lock:
        up = st.uploads.multipart.get(upload_id)
    if up is None or up["oid"] != oid or up["repo"] != repo.internal_id:
        raise WriteError(404, "The specified upload does not exist.", "NoSuchUpload")
    n = int(part) if part.isdigit() else 0
    if not 1 <= n <= math.ceil(up["size"] / up["chunk"]):
        raise WriteError(400, f"Part number must be an integer between 1 and "
                              f"{math.ceil(up['size'] / up['chunk'])}", "InvalidArgument")
    h.log_extra["part"] = n
    folder = os.path.join(st.uploads.root, "parts", upload_id)
    os.makedirs(folder, exist_ok=True)
    tmp = st.uploads.temp_path()
    got = receive_body(h, tmp)
    if got is None:
        os.unlink(tmp)
        return
    final = os.path.join(folder, f"{n:05d}")
    os.replace(tmp, final)  # a retried part replaces the earlier one, as on S3
    etag = f'"{got[1]}"'
    with st.uploads.lock:
        up["parts"][n] = (final, etag)
    h.send(200, {"ETag": etag, "x-amz-request-id": secrets.token_hex(8).upper()})


# ---- the commit ----------------------------------------------------------------------------

def parse_ndjson(raw):
    """(header value, [(key, value)]) of an ndjson commit payload."""
    lines = []
    for n, line in enumerate(raw.splitlines(), 1):
        if line.strip():
            try:
                item = json.loads(line)
            except ValueError as e:
                raise WriteError(400, f"Bad request: line {n} is not JSON: {e}")
            if not isinstance(item, dict) or not isinstance(item.get("value"), dict):
                raise WriteError(400, f"Bad request: line {n} must be {{key, value}}")
            lines.append((item.get("key"), item["value"]))
    if not lines or lines[0][0] != "header":
        raise WriteError(400, "Bad request: the first line must be the header")
    header = lines[0][1]
    if not isinstance(header.get("summary"), str) or not header["summary"].strip():
        raise WriteError(400, "Bad request: the commit summary is required")
    return header, lines[1:]


def clean_path(path):
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        raise WriteError(400, f"Invalid path: {path!r}")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[0] == ".git":
        raise WriteError(400, f"Invalid path: {path!r}")
    return path


def apply_operations(st, repo, base_files, ops):
    """The files after the commit's operations, in order; raises WriteError and changes
    nothing when one fails (the commit is all or nothing)."""
    files = dict(base_files)
    lfs_paths = []
    for key, value in ops:
        path = clean_path(value.get("path") if key != "deletedFolder"
                          else str(value.get("path", "")).rstrip("/"))
        if key == "file":
            files[path] = regular_file(path, value)
        elif key == "lfsFile":
            files[path] = lfs_file(st, repo, path, value)
            lfs_paths.append(path)
        elif key == "deletedFile":
            if path not in files:
                raise WriteError(404, f"A file with this name doesn't exist: {path}",
                                 "EntryNotFound")
            del files[path]
        elif key == "deletedFolder":
            victims = [p for p in files if p.startswith(path + "/")]
            if not victims:
                raise WriteError(404, f"A folder with this name doesn't exist: {path}",
                                 "EntryNotFound")
            for p in victims:
                del files[p]
        else:
            raise WriteError(400, f"Bad request: unknown operation {key!r}")
    track_lfs_paths(files, lfs_paths)
    check_no_file_folder_clash(files)
    return files


def regular_file(path, value):
    content, encoding = value.get("content"), value.get("encoding", "utf-8")
    if not isinstance(content, str):
        raise WriteError(400, f"Bad request: no content for {path}")
    try:
        data = base64.b64decode(content, validate=True) if encoding == "base64" \
            else content.encode("utf-8")
    except ValueError as e:
        raise WriteError(400, f"Bad request: {path}: {e}")
    if len(data) >= LFS_SIZE_THRESHOLD:  # the git hook's text [O]; for this API it is [U]
        raise WriteError(400, f"Your push was rejected because it contains files larger than "
                              f"10 MiB. Offending file: {path}")
    return FileInfo(path, len(data), hashlib.sha256(data).hexdigest(), git_blob_sha1(data),
                    False, data)


def lfs_file(st, repo, path, value):
    if "oldPath" in value:
        raise WriteError(400, "fakehub does not emulate lfsFile renames (oldPath)")
    oid = value.get("oid")
    if value.get("algo", "sha256") != "sha256" or not isinstance(oid, str) or not OID_RE.match(oid):
        raise WriteError(400, f"Bad request: {path}: algo must be sha256 and oid 64 hex digits")
    have = st.uploads.lookup(repo, oid)
    if have is None:
        raise WriteError(400, f"{MISSING_LFS_MESSAGE} ({path}: {oid})")
    if value.get("size") is not None and value["size"] != have.size:
        raise WriteError(400, f"{path}: size {value['size']} does not match the LFS object's "
                              f"{have.size}")
    return FileInfo(path, have.size, oid, None, True, have.source)


def track_lfs_paths(files, lfs_paths):
    """The Hub adds a `<path> filter=lfs ...` line to .gitattributes for each LFS file that
    no pattern covers yet [O]."""
    ga = files.get(".gitattributes")
    text = ga.read(0, ga.size).decode("utf-8", "replace") if ga is not None else ""
    rule = LfsRule("auto", text)
    missing = [p for p in lfs_paths if not rule.is_lfs(p, 1)]  # size 1: patterns only
    if not missing:
        return
    if text and not text.endswith("\n"):
        text += "\n"
    text += "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in missing)
    files[".gitattributes"] = regular_file(".gitattributes", {"content": text})


def check_no_file_folder_clash(files):
    folders = set()
    for p in files:
        parts = p.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = folders.intersection(files)
    if clash:
        raise WriteError(400, f"Invalid commit: {sorted(clash)[0]} is both a file and a folder")


def commit(h, ns, name, rev, create_pr):
    st = h.server.state
    repo = writable_repo(h, ns, name, create_pr)
    if repo is None:
        return
    header, ops = parse_ndjson(h.request_body)
    parent = header.get("parentCommit")
    if parent is not None and (not isinstance(parent, str) or not SHA1_RE.match(parent)):
        raise WriteError(400, "Bad request: parentCommit must be a 40-hex commit id")
    table, key, _ = write_target(repo, rev, create_pr)
    if not create_pr and st.faults.take("hub", "POST", h.decoded_path, ("branch_moved",)):
        h.fault_used = "branch_moved"
        move_branch_behind_the_clients_back(repo, table, key)
    for _ in range(10):  # optimistic: retried when another commit lands meanwhile
        new, pr = try_commit(st, repo, table, key, rev, parent, header, ops)
        if new is not None:
            break
    else:
        raise WriteError(409, "Too many concurrent commits on this branch")  # [U]
    st.register_blobs(new.files)
    st.count("write_commits")
    h.log_extra["commit"] = new.sha
    out = {"success": True, "commitOid": new.sha, "hookOutput": "",
           "commitUrl": f"{st.hub_base}/datasets/{repo.id}/commit/{new.sha}"}
    if pr is not None:
        out["pullRequestUrl"] = f"{st.hub_base}/datasets/{repo.id}/discussions/{pr}"
    h.send_json(200, out)


def try_commit(st, repo, table, key, rev, parent, header, ops):
    """(new Commit, PR number or None) or (None, None) when the branch moved meanwhile."""
    if key is None:  # a new pull request, based on parentCommit or on the revision
        base = repo.commits.get(parent) if parent else repo.resolve(rev)
        if base is None:
            raise WriteError(404, f"Invalid rev id: {parent}", "RevisionNotFound")
    else:
        with repo.lock:
            base = repo.commits[table[key]]
        if parent is not None and parent != base.sha:
            raise WriteError(412, BRANCH_MOVED_MESSAGE)
    files = apply_operations(st, repo, base.files, ops)
    c = Commit(files, base.sha, header["summary"], time.time())
    c.description = header.get("description") or ""
    with repo.lock:
        if key is None:
            pr = str(max([int(n) for n in repo.prs if n.isdigit()] + [0]) + 1)
            repo.commits[c.sha] = c
            repo.prs[pr] = c.sha
            return c, pr
        if table.get(key) != base.sha:
            return None, None
        repo.commits[c.sha] = c
        table[key] = c.sha
    return c, None


def move_branch_behind_the_clients_back(repo, table, key):
    """The branch_moved fault: an empty commit by "someone else" lands first."""
    with repo.lock:
        head = repo.commits[table[key]]
        c = Commit(dict(head.files), head.sha, "Concurrent commit (fakehub fault)", time.time())
        repo.commits[c.sha] = c
        table[key] = c.sha
