// Drives the official @huggingface/hub client's upload path against the emulator and prints
// what happened as JSON; test_fidelity_write.py checks it against the emulator and the source
// files. No Xet: the first commit passes useXet:false, the second leaves the client's default
// (Xet first) and relies on the emulator answering the LFS batch with a non-Xet transfer.
//
//   node upload.mjs HUB_URL REPO WRITE_TOKEN READ_TOKEN SPEC_JSON
//
// SPEC_JSON: {"first": [{path, local, asUrl?}], "second": {path, local}, "delete": path}
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import {
  commit, datasetInfo, deleteFile, downloadFile, listFiles, pathsInfo, uploadFile, uploadFiles,
} from "@huggingface/hub";

const [hubUrl, name, writeToken, readToken, specJson] = process.argv.slice(2);
const spec = JSON.parse(specJson);
const repo = { type: "dataset", name };

// A file given asUrl goes in as a file: URL, so the client streams it from disk (FileBlob).
const content = (f) => (f.asUrl ? pathToFileURL(f.local) : new Blob([readFileSync(f.local)]));

async function failure(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return { status: e.statusCode ?? null, message: String(e.message) };
  }
}

const before = await datasetInfo({ name, hubUrl, additionalFields: ["sha"], accessToken: writeToken });

// 1. The publish: several files in one commit, plain LFS forced, pinned to the parent.
const first = await uploadFiles({
  repo, hubUrl, accessToken: writeToken, useXet: false, parentCommit: before.sha,
  commitTitle: "Publish wheels", commitDescription: "fidelity upload",
  files: spec.first.map((f) => ({ path: f.path, content: content(f) })),
});

// 2. One more file with the client's defaults (it offers Xet; the emulator answers LFS).
const second = await uploadFile({
  repo, hubUrl, accessToken: writeToken, commitTitle: "Add one more",
  file: { path: spec.second.path, content: content(spec.second) },
});

// 3. Errors the client must surface: a stale parent, a read-only token.
const stale = await failure(commit({
  repo, hubUrl, accessToken: writeToken, title: "stale", parentCommit: before.sha, useXet: false,
  operations: [{ operation: "addOrUpdate", path: "stale.txt", content: new Blob(["x"]) }],
}));
const readOnly = await failure(uploadFile({
  repo, hubUrl, accessToken: readToken, useXet: false,
  file: { path: "denied.txt", content: new Blob(["no"]) },
}));

// 4. A delete.
const third = await deleteFile({ repo, hubUrl, accessToken: writeToken, path: spec.delete });
const head = third.commit.oid;

// 5. Read everything back with the same client, pinned to the last commit.
const files = {};
for await (const e of listFiles({ repo, recursive: true, revision: head, hubUrl, accessToken: writeToken })) {
  if (e.type === "file") files[e.path] = { size: e.size, oid: e.oid, lfs: e.lfs ?? null };
}
const uploaded = [...spec.first.map((f) => f.path), spec.second.path];
const downloads = {};
for (const path of uploaded) {
  const blob = await downloadFile({ repo, path, revision: head, hubUrl, accessToken: writeToken });
  const bytes = Buffer.from(await blob.arrayBuffer());
  downloads[path] = { size: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
}
const info = await pathsInfo({ repo, paths: uploaded, revision: head, hubUrl, accessToken: writeToken });
const after = await datasetInfo({ name, hubUrl, additionalFields: ["sha"], accessToken: writeToken });

console.log(JSON.stringify({
  before: before.sha,
  commits: [first.commit, second.commit, third.commit],
  after: after.sha,
  stale,
  readOnly,
  files,
  downloads,
  pathsInfo: info.map((p) => ({ path: p.path, size: p.size, lfsOid: p.lfs?.oid ?? null })),
}));
