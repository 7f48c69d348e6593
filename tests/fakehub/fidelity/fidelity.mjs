// Drives the official @huggingface/hub client against the emulator and prints what it saw as
// JSON: every file of a recursive listing with its size, and the sha256 of the bytes that
// downloadFile returned. test_fidelity.py compares that with the generator's manifest.
//
//   node fidelity.mjs HUB_URL REPO [TOKEN]
import { createHash } from "node:crypto";
import { datasetInfo, downloadFile, fileDownloadInfo, listFiles, pathsInfo } from "@huggingface/hub";

const [hubUrl, name, token] = process.argv.slice(2);
const repo = { type: "dataset", name };
const creds = token ? { accessToken: token } : {};

const info = await datasetInfo({ name, hubUrl, additionalFields: ["sha"], ...creds });
const files = {};
const dirs = [];
for await (const entry of listFiles({ repo, recursive: true, hubUrl, ...creds })) {
  if (entry.type === "directory") {
    dirs.push(entry.path);
  } else {
    files[entry.path] = { size: entry.size, lfs: entry.lfs ?? null, oid: entry.oid };
  }
}

// Download every file (a few at a time), pinned to the commit the info call reported.
const paths = Object.keys(files);
let next = 0;
async function worker() {
  while (next < paths.length) {
    const path = paths[next++];
    const blob = await downloadFile({ repo, path, revision: info.sha, hubUrl, ...creds });
    if (blob === null) throw new Error(`downloadFile returned null for ${path}`);
    const bytes = Buffer.from(await blob.arrayBuffer());
    files[path].sha256 = createHash("sha256").update(bytes).digest("hex");
    files[path].downloaded = bytes.length;
  }
}
await Promise.all([worker(), worker(), worker(), worker()]);

// A ranged read through Blob.slice: the client asks for a Range and must get exactly it.
const big = paths.reduce((a, b) => (files[a].size >= files[b].size ? a : b));
const blob = await downloadFile({ repo, path: big, revision: info.sha, hubUrl, ...creds });
const slice = Buffer.from(await blob.slice(1000, 1100).arrayBuffer());
const sliceSha = createHash("sha256").update(slice).digest("hex");

const dl = await fileDownloadInfo({ repo, path: big, revision: info.sha, hubUrl, ...creds });
const pinfo = await pathsInfo({ repo, paths: [big, "no/such/file"], revision: info.sha, hubUrl, ...creds });
const missing = await downloadFile({ repo, path: "no/such/file.whl", hubUrl, ...creds });

console.log(JSON.stringify({
  sha: info.sha,
  files,
  dirs,
  big,
  slice: { offset: 1000, length: slice.length, sha256: sliceSha },
  downloadInfo: { size: dl.size, etag: dl.etag },
  pathsInfo: pinfo.map((p) => ({ path: p.path, size: p.size, oid: p.lfs?.oid ?? p.oid })),
  missingIsNull: missing === null,
}));
