"""The Hub routes (hub-api.md §7) and the CDN route, over httpcore's plumbing.

Routing works on the raw path split on literal "/", each piece percent-decoded afterwards, so
a revision such as refs%2Fpr%2F1 stays one segment, %2F and "/" are the same after it, and "+"
is a literal plus (never a space).
"""
import base64
import hashlib
import hmac
import json
import time
import uuid
from urllib.parse import parse_qs, quote, urlencode

import hub_write
from httpcore import Body, Handler, parse_range

TRUE = {"true", "True", "1"}
FALSE = {"false", "False", "0"}
EXPANDABLE = ["author", "cardData", "citation", "createdAt", "disabled", "description", "downloads",
              "downloadsAllTime", "gated", "lastModified", "likes", "mainSize",
              "paperswithcode_id", "private", "siblings", "sha", "tags", "trendingScore",
              "usedStorage", "resourceGroup"]


def qbool(value, default=False):
    if value is None:
        return default
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    return default


def enc_path(path):
    """Per-segment encoding with nothing but unreserved characters left raw ("+" -> %2B)."""
    return "/".join(quote(s, safe="") for s in path.split("/"))


class HubHandler(Handler):
    def q(self, name):
        for k, v in self.query:
            if k == name:
                return v
        return None

    def q_all(self, name):
        return [v for k, v in self.query if k in (name, name + "[]")]

    # ---- access control (hub-api.md §6.2) --------------------------------------------------

    def lookup_repo(self, ns, name, content):
        """(repo, None) or (None, True) when an error response has been sent; (repo, False)
        for a case-different id whose 307 has been sent."""
        st = self.server.state
        if self.token is not None and self.token not in st.tokens:
            self.send_error_json(401, "Invalid credentials in Authorization header")
            return None, True
        repo = st.find_repo(f"{ns}/{name}")
        allowed = repo is not None and (self.token is not None
                                        and st.token_has_access(self.token, repo.id))
        if repo is None or (repo.private and not allowed):
            if self.token is None:
                self.send_error_json(401, "Invalid username or password.")
            else:
                self.send_error_json(404, "Repository not found", "RepoNotFound")
            return None, True
        if repo.id != f"{ns}/{name}":
            self.redirect_canonical(f"{ns}/{name}", repo.id)
            return None, True
        if content and repo.gated and not allowed:
            if self.token is None:
                self.send_error_json(401, f"Access to dataset {repo.id} is restricted. You must have "
                                     "access to it and be authenticated to access it. Please log in.",
                                     "GatedRepo")
            else:
                self.send_error_json(403, f"Access to dataset {repo.id} is restricted and you are not in "
                                     f"the authorized list. Visit {st.hub_base}/datasets/{repo.id} "
                                     "to ask for access.", "GatedRepo")
            return None, True
        return repo, False

    def redirect_canonical(self, asked, canonical):
        raw = self.path.partition("?")[0]
        loc = raw.replace("/" + asked + "/", "/" + canonical + "/", 1)
        if raw.endswith("/" + asked):
            loc = raw[: -len(asked)] + canonical
        if self.raw_query:
            loc += "?" + self.raw_query
        self.send(307, {"Location": loc}, Body(b"Redirecting to " + loc.encode()))

    def resolve_or_404(self, repo, rev):
        commit = repo.resolve(rev)
        if commit is None:
            self.send_error_json(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return commit

    # ---- routing ---------------------------------------------------------------------------

    def route(self, method):
        if hub_write.route_hub(self, method):  # the write side (preupload, LFS, commit)
            return
        s = self.segments
        if len(s) >= 5 and s[1] == "api" and s[2] == "datasets":
            return self.route_api(method, s[3], s[4], s[5:])
        if len(s) >= 7 and s[1] == "api" and s[2] == "resolve-cache" and s[3] == "datasets":
            if method not in ("GET", "HEAD"):
                return self.send_error_json(405, "Method not allowed")
            return self.resolve_cache(s[4], s[5], s[6], "/".join(s[7:]))
        if len(s) >= 6 and s[1] == "datasets" and s[4] in ("resolve", "raw"):
            if method not in ("GET", "HEAD"):
                return self.send_error_json(405, "Method not allowed")
            if len(s) < 7:
                return self.send_error_json(404, "Entry not found", "EntryNotFound")
            rev, path = s[5], "/".join(s[6:])
            if s[4] == "raw":
                return self.raw(s[2], s[3], rev, path)
            return self.resolve(s[2], s[3], rev, path)
        self.send_error_json(404, "Sorry, we can't find the page you are looking for.")

    def route_api(self, method, ns, name, rest):
        if method == "POST" and len(rest) >= 2 and rest[0] == "paths-info":
            return self.paths_info(ns, name, "/".join(rest[1:]))
        if method not in ("GET", "HEAD"):
            return self.send_error_json(405, "Method not allowed")
        if not rest:
            return self.info(ns, name, "main")
        if rest[0] == "revision" and len(rest) >= 2:
            # One segment per hub-api.md §2; an unencoded refs/pr/1 is joined back leniently.
            return self.info(ns, name, "/".join(rest[1:]))
        if rest[0] == "refs" and len(rest) == 1:
            return self.refs(ns, name)
        if rest[0] == "tree" and len(rest) >= 2:
            path = "/".join(rest[2:]).strip("/")
            return self.tree(ns, name, rest[1], path)
        self.send_error_json(404, "Sorry, we can't find the page you are looking for.")

    # ---- repo info, refs -------------------------------------------------------------------

    def info(self, ns, name, rev):
        repo, done = self.lookup_repo(ns, name, content=False)
        if done:
            return
        commit = self.resolve_or_404(repo, rev)
        if commit is None:
            return
        blobs = qbool(self.q("blobs"))
        full = {
            "_id": repo.internal_id,
            "id": repo.id,
            "author": repo.id.split("/")[0],
            "sha": commit.sha,
            "lastModified": commit.iso_date(),
            "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(repo.created)),
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": ["region:us"],
            "cardData": {},
            "description": "",
            "siblings": [self.sibling(commit.files[p], blobs) for p in sorted(commit.files)],
            "usedStorage": sum(f.size for f in commit.files.values()),
        }
        expand = self.q_all("expand")
        if expand:
            unknown = [e for e in expand if e not in EXPANDABLE]
            if unknown:
                return self.send_error_json(400, f"Invalid expand value: {unknown[0]}")
            full = {k: full[k] for k in ["_id", "id"] + expand if k in full}
        self.send_json(200, full)

    @staticmethod
    def sibling(f, blobs):
        d = {"rfilename": f.path}
        if blobs:
            d["size"] = f.size
            d["blobId"] = f.oid
            if f.lfs:
                d["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": len(f.pointer_text())}
        return d

    def refs(self, ns, name):
        repo, done = self.lookup_repo(ns, name, content=False)
        if done:
            return
        with repo.lock:
            def items(table, prefix):
                return [{"name": n, "ref": prefix + n, "targetCommit": sha}
                        for n, sha in sorted(table.items())]
            body = {"branches": items(repo.branches, "refs/heads/"),
                    "tags": items(repo.tags, "refs/tags/"), "converts": []}
            if qbool(self.q("include_prs")):
                body["pullRequests"] = items(repo.prs, "refs/pr/")
        self.send_json(200, body)

    # ---- tree and paths-info -----------------------------------------------------------------

    def entry(self, commit, path, is_dir, expand):
        if is_dir:
            e = {"type": "directory", "oid": commit.tree_oid(path), "size": 0, "path": path}
        else:
            f = commit.files[path]
            e = {"type": "file", "oid": f.oid, "size": f.size, "path": path}
            if f.lfs:
                e["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": len(f.pointer_text())}
                if self.server.state.config["xet_hash"]:
                    e["xetHash"] = hashlib.sha256(b"xet" + f.sha256.encode()).hexdigest()
        if expand:
            e["lastCommit"] = {"id": commit.sha, "title": commit.title, "date": commit.iso_date()}
            if not is_dir:
                e["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False},
                                           "pickleImportScan": None}
        return e

    def tree(self, ns, name, rev, path):
        repo, done = self.lookup_repo(ns, name, content=False)
        if done:
            return
        commit = self.resolve_or_404(repo, rev)
        if commit is None:
            return
        if path not in commit.dirs:
            return self.send_error_json(404, f"{path} does not exist on \"{rev}\"", "EntryNotFound",
                                        {"X-Repo-Commit": commit.sha})
        recursive = qbool(self.q("recursive"))
        expand = qbool(self.q("expand"))
        self.paginate(commit, commit.tree_items(path, recursive), expand)

    def paginate(self, commit, items, expand):
        st = self.server.state
        default = 50 if expand else 1000
        try:
            limit = int(self.q("limit") or default)
        except ValueError:
            return self.send_error_json(400, "Invalid limit")
        limit = max(1, min(limit, 100 if expand else 1000, st.config["page_size"] or 1 << 30))
        cursor = self.q("cursor")
        start = 0
        if cursor:
            try:
                start = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["o"]
            except (ValueError, KeyError, TypeError):
                return self.send_error_json(400, "Invalid cursor")
        page = items[start:start + limit]
        headers = {}
        if start + limit < len(items):
            nxt = start + limit
            link_fault = st.faults.take("hub", self.method, self.decoded_path,
                                        ("link_repeat", "link_cross_origin"))
            base = st.hub_base
            if link_fault:
                self.fault_used = link_fault.kind
                if link_fault.kind == "link_repeat":
                    nxt = start
                else:
                    base = st.cdn_base
            token = base64.urlsafe_b64encode(json.dumps({"o": nxt}).encode()).decode().rstrip("=")
            params = [(k, v) for k, v in self.query if k != "cursor"] + [("cursor", token)]
            url = f"{base}{self.path.partition('?')[0]}?{urlencode(params)}"
            headers["Link"] = f'<{url}>; rel="next"'
        # Each entry's JSON is made once per commit (a commit never changes): a page of a
        # 100k-entry recursive listing then costs the join, not 1000 dicts and their encoding
        # (55 us an entry before, which made the emulator, not the mount, the slow side of a
        # cold `ls -R`).
        xet = self.server.state.config["xet_hash"]
        cache = commit.entry_json
        parts = []
        for p, d in page:
            key = (p, d, expand, xet)
            text = cache.get(key)
            if text is None:
                text = cache[key] = json.dumps(self.entry(commit, p, d, expand),
                                               separators=(",", ":"))
            parts.append(text)
        self.send_json_text(200, "[" + ",".join(parts) + "]", headers)

    def paths_info(self, ns, name, rev):
        repo, done = self.lookup_repo(ns, name, content=False)
        if done:
            return
        commit = self.resolve_or_404(repo, rev)
        if commit is None:
            return
        ctype = self.headers.get("Content-Type") or ""
        try:
            if ctype.startswith("application/json"):
                body = json.loads(self.request_body or b"{}")
                paths, expand = body.get("paths", []), bool(body.get("expand", False))
            else:
                form = parse_qs(self.request_body.decode(), keep_blank_values=True)
                paths = form.get("paths", [])
                expand = qbool((form.get("expand") or [None])[0])
            if not isinstance(paths, list):
                raise ValueError("paths must be a list")
        except (ValueError, AttributeError, UnicodeDecodeError) as e:
            return self.send_error_json(400, f"Bad request: {e}")
        out = []
        for p in paths:
            p = str(p).strip("/")
            if p in commit.files:
                out.append(self.entry(commit, p, False, expand))
            elif p in commit.dirs and p:
                out.append(self.entry(commit, p, True, expand))
        self.send_json(200, out)

    # ---- file content --------------------------------------------------------------------------

    def resolve(self, ns, name, rev, path):
        st = self.server.state
        repo, done = self.lookup_repo(ns, name, content=True)
        if done:
            return
        commit = self.resolve_or_404(repo, rev)
        if commit is None:
            return
        f = commit.files.get(path)
        if f is None:
            return self.send_error_json(404, f"{path} does not exist", "EntryNotFound",
                                        {"X-Repo-Commit": commit.sha})
        if f.lfs:
            # --redirect-base: an outside server (e.g. a benchmark's nginx) holds the bytes.
            redirect = st.config.get("redirect_base")
            url = redirect + enc_path(path) if redirect else st.sign_cdn_url(repo, f)
            headers = {"Location": url, "X-Repo-Commit": commit.sha,
                       "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size),
                       "Content-Type": "text/plain; charset=utf-8",
                       "Access-Control-Expose-Headers": "X-Repo-Commit,X-Request-Id,X-Error-Code,"
                       "X-Error-Message,ETag,Link,Accept-Ranges,Content-Range,X-Linked-Size,"
                       "X-Linked-ETag"}
            if st.config["xet_hash"]:
                headers["X-Xet-Hash"] = hashlib.sha256(b"xet" + f.sha256.encode()).hexdigest()
            return self.send(302, headers, Body(b"Found. Redirecting to " + url.encode()))
        if f.size == 0 or repo.private or repo.gated:
            return self.serve_file(commit, f)  # case C: served directly
        orig = f"/datasets/{repo.id}/resolve/{rev}/{path}"
        loc = (f"/api/resolve-cache/datasets/{repo.id}/{commit.sha}/{enc_path(path)}"
               f"?{quote(orig, safe='')}=&etag=%22{f.git_sha1}%22")
        self.send(307, {"Location": loc, "X-Repo-Commit": commit.sha,
                        "Content-Type": "text/plain; charset=utf-8"},
                  Body(b"Temporary Redirect. Redirecting to " + loc.encode()))

    def resolve_cache(self, ns, name, sha, path):
        repo, done = self.lookup_repo(ns, name, content=True)
        if done:
            return
        commit = repo.commits.get(sha)
        if commit is None:
            return self.send_error_json(404, f"Invalid rev id: {sha}", "RevisionNotFound")
        f = commit.files.get(path)
        if f is None:
            return self.send_error_json(404, f"{path} does not exist", "EntryNotFound",
                                        {"X-Repo-Commit": commit.sha})
        self.serve_file(commit, f)

    def raw(self, ns, name, rev, path):
        repo, done = self.lookup_repo(ns, name, content=True)
        if done:
            return
        commit = self.resolve_or_404(repo, rev)
        if commit is None:
            return
        f = commit.files.get(path)
        if f is None:
            return self.send_error_json(404, f"{path} does not exist", "EntryNotFound",
                                        {"X-Repo-Commit": commit.sha})
        if f.lfs:
            data = f.pointer_text().encode()
            return self.send(200, {"ETag": f'"{f.pointer_sha1}"', "X-Repo-Commit": commit.sha,
                                   "Content-Type": "text/plain; charset=utf-8"}, Body(data))
        self.serve_file(commit, f)

    def serve_file(self, commit, f):
        etag = f'"{f.etag}"'
        name = f.path.rsplit("/", 1)[-1]
        headers = {"ETag": etag, "X-Repo-Commit": commit.sha, "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream",
                   "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; "
                                          f"filename=\"{name}\";"}
        serve_content(self, f, headers)


def serve_content(h, f, headers):
    """200/206/304/416 for a file, shared by the Hub (non-LFS) and the CDN (LFS)."""
    inm = h.headers.get("If-None-Match")
    if inm and inm.strip() in (headers.get("ETag"), "*"):
        return h.send(304, {"ETag": headers["ETag"]})
    rng = None
    if f.size > 0 and h.headers.get("Range"):
        ignore = h.server.state.faults.take(h.server.kind, h.method, h.decoded_path,
                                            ("ignore_range",))
        if ignore:
            h.fault_used = "ignore_range"
        else:
            rng = parse_range(h.headers.get("Range"), f.size)
    if rng == "unsatisfiable":
        return h.send_error_json(416, "Requested Range Not Satisfiable",
                                 headers={"Content-Range": f"bytes */{f.size}"})
    if rng is None:
        if not f.lfs and f.size < 1 << 20 and h.method == "GET":
            data = h.maybe_gzip(f.read(0, f.size), headers)
            if "Content-Encoding" in headers:
                return h.send(200, headers, Body(data))
        return h.send(200, headers, Body(info=f, offset=0, length=f.size))
    start, end = rng
    headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
    h.send(206, headers, Body(info=f, offset=start, length=end - start + 1))


class CdnHandler(Handler):
    """The signed-URL origin. It never needs auth, and an Authorization header arriving here is
    a token leak: it is answered 400 and counted, so a test sees it in the log and the stats."""

    def common_headers(self):
        return {"X-Amz-Cf-Id": uuid.uuid4().hex, "Via": "1.1 fakehub-cdn"}

    def route(self, method):
        st = self.server.state
        if hub_write.route_storage(self, method):  # LFS uploads: this is also the storage host
            return
        if method not in ("GET", "HEAD"):
            return self.send_error_json(405, "Method not allowed")
        if self.has_auth:
            st.count("cdn_auth_violations")
            self.log_extra["violation"] = "authorization-sent-to-cdn"
            return self.send_error_json(400, "Authorization header sent to a signed URL")
        s = self.segments
        if len(s) != 4 or s[1] != "xet-bridge-us":
            return self.send_error_json(404, "Not found")
        verdict = st.check_signature(self.path.partition("?")[0], dict(self.query))
        if verdict is not None:
            return self.send(403, {"Content-Type": "application/xml"},
                             Body(f"<Error><Code>AccessDenied</Code><Message>{verdict}</Message>"
                                  "</Error>".encode()))
        f = st.blobs.get(s[3])
        if f is None:
            return self.send_error_json(404, "Not found")
        name = f.path.rsplit("/", 1)[-1]
        # The bridge is content-addressed and its ETag is the content sha256 [I]: the official
        # JS client follows the redirect and takes the final response's ETag as the file's.
        headers = {"ETag": f'"{f.sha256}"',
                   "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                   "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; "
                                          f"filename=\"{name}\";",
                   "Cache-Control": "public, max-age=604800, immutable"}
        serve_content(self, f, headers)


def sign(secret, path, amz_date, expires, generation):
    msg = f"{path}|{amz_date}|{expires}|{generation}".encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()
