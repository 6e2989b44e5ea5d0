// spin ui: the few scripts the pages need. Everything works through the
// app's own API on this machine; nothing is fetched from elsewhere.
"use strict";

// BASE is the secret path every address of the app starts with.
const BASE = document.documentElement.dataset.base || "";

function message(text, isError) {
  const m = document.getElementById("message");
  if (!m) { alert(text); return; }
  m.textContent = text;
  m.className = "message" + (isError ? " error" : "");
  m.hidden = false;
}

async function post(url, params) {
  const resp = await fetch(url, {
    method: "POST",
    body: new URLSearchParams(params),
    credentials: "same-origin",
  });
  let body = {};
  try { body = await resp.json(); } catch (e) { body = {error: "The app answered " + resp.status}; }
  if (!resp.ok || body.error) {
    message(body.error || ("The app answered " + resp.status), true);
    return null;
  }
  return body;
}

function join(dir, name) {
  return dir.replace(/\/+$/, "") + "/" + name;
}

function parentOf(path) {
  const i = path.lastIndexOf("/");
  return i < 0 ? path : path.slice(0, i);
}

// upload sends the files, each a {file, path} with path relative to dir,
// one after the other, streaming each as the request body, and shows the
// progress of all of them in one bar.
async function upload(dir, items) {
  if (items.length === 0) return;
  const box = document.getElementById("progress");
  const bar = box.querySelector(".bar");
  const label = box.querySelector(".label");
  box.hidden = false;
  const total = items.reduce((n, it) => n + it.file.size, 0) || 1;
  let done = 0;
  let failed = 0;
  for (let i = 0; i < items.length; i++) {
    const it = items[i];
    const name = join(dir, it.path);
    const ok = await new Promise((resolve) => {
      const x = new XMLHttpRequest();
      x.open("POST", BASE + "/api/put?parents=1&name=" + encodeURIComponent(name));
      x.upload.onprogress = (e) => {
        const pct = Math.floor(100 * (done + e.loaded) / total);
        bar.style.width = pct + "%";
        label.textContent = "Uploading " + it.path + " (" + (i + 1) + " of " + items.length + "): " + pct + "%";
      };
      x.onload = () => {
        let body = {};
        try { body = JSON.parse(x.responseText); } catch (e) {}
        if (x.status !== 200 || body.error) {
          message(it.path + ": " + (body.error || ("the app answered " + x.status)), true);
          resolve(false);
          return;
        }
        resolve(true);
      };
      x.onerror = () => { message(it.path + ": the upload was cut off", true); resolve(false); };
      x.send(it.file);
    });
    if (!ok) failed++;
    done += it.file.size;
  }
  bar.style.width = "100%";
  label.textContent = failed ? (failed + " of " + items.length + " files failed") : ("Uploaded " + items.length + " files");
  box.dataset.done = "1";
  if (!failed) location.reload();
}

// entriesOf walks a dropped folder and returns its files with their paths.
async function entriesOf(entry, prefix) {
  if (entry.isFile) {
    const file = await new Promise((res, rej) => entry.file(res, rej));
    return [{file, path: prefix + entry.name}];
  }
  const reader = entry.createReader();
  let out = [];
  for (;;) {
    const batch = await new Promise((res, rej) => reader.readEntries(res, rej));
    if (batch.length === 0) break;
    for (const e of batch) out = out.concat(await entriesOf(e, prefix + entry.name + "/"));
  }
  return out;
}

function setupBrowse() {
  const bar = document.querySelector(".toolbar");
  if (!bar) return;
  const dir = bar.dataset.dir;
  const files = document.getElementById("upload-files");
  if (files) files.addEventListener("change", () => {
    upload(dir, Array.from(files.files, (f) => ({file: f, path: f.webkitRelativePath || f.name})));
  });
  const folder = document.getElementById("upload-folder");
  if (folder) folder.addEventListener("change", () => {
    upload(dir, Array.from(folder.files, (f) => ({file: f, path: f.webkitRelativePath || f.name})));
  });
  const drop = document.getElementById("drop");
  if (drop) {
    document.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
    document.addEventListener("dragleave", () => drop.classList.remove("over"));
    document.addEventListener("drop", async (e) => {
      e.preventDefault();
      drop.classList.remove("over");
      let items = [];
      const entries = Array.from(e.dataTransfer.items || [], (i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
      if (entries.length) {
        for (const en of entries) items = items.concat(await entriesOf(en, ""));
      } else {
        items = Array.from(e.dataTransfer.files, (f) => ({file: f, path: f.name}));
      }
      upload(dir, items);
    });
  }
  const nf = document.getElementById("new-folder");
  if (nf) nf.addEventListener("click", async () => {
    const name = prompt("Name of the new folder");
    if (!name) return;
    if (await post(BASE + "/api/mkdir", {name: join(dir, name)})) location.reload();
  });
  document.querySelectorAll("tr[data-path]").forEach((tr) => {
    const path = tr.dataset.path;
    const name = tr.dataset.name;
    const on = (cls, fn) => { const b = tr.querySelector(cls); if (b) b.addEventListener("click", fn); };
    on(".rename", async () => {
      const to = prompt("New name for " + name, name);
      if (!to || to === name) return;
      if (await post(BASE + "/api/rename", {old: path, new: join(parentOf(path), to)})) location.reload();
    });
    on(".delete", async () => {
      if (!confirm("Delete " + name + "?")) return;
      if (await post(BASE + "/api/delete", {name: path})) location.reload();
    });
    on(".mklink", async () => {
      const at = prompt("Make a link to " + path + " named", name + " link");
      if (!at) return;
      if (await post(BASE + "/api/link", {target: path, name: join(dir, at)})) location.reload();
    });
  });
}

function setupViewer() {
  const v = document.querySelector(".viewer");
  if (!v) return;
  document.addEventListener("keydown", (e) => {
    if (e.key === "ArrowLeft" && v.dataset.prev) location.href = v.dataset.prev;
    if (e.key === "ArrowRight" && v.dataset.next) location.href = v.dataset.next;
  });
}

setupBrowse();
setupViewer();
