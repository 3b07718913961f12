// Upload by drag and drop (or a file picker) with progress; documents with their versions and chunks; collections
// and folders.
import { useState } from "preact/hooks";
import { api, when } from "../api.js";
import { Busy, Failure, Page, Table, useLoad } from "../ui.jsx";

function base64(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

export function Documents({ context }) {
  const [data, error, busy, reload] = useLoad(async () => {
    const [docs, collections, folders] = await Promise.all([
      api("POST", "/documents/lookup", { op: "list", limit: 100, order: "desc" }),
      api("POST", "/knowledge/collections", { action: "list" }),
      api("GET", "/folders", { limit: 100 }),
    ]);
    return { docs: docs.items || [], collections: collections.collections || [], folders: folders.items || [] };
  }, [context]);
  const [progress, setProgress] = useState(null);
  const [note, setNote] = useState(null);
  const [over, setOver] = useState(false);
  const [open, setOpen] = useState(null);
  async function upload(files) {
    for (const file of files) {
      setProgress({ name: file.name, done: 0 });
      try {
        const out = await api("POST", "/documents", { bytes_base64: base64(await file.arrayBuffer()), filename: file.name,
          title: file.name.replace(/\.[^.]+$/, ""), mime_type: file.type || undefined },
          { onProgress: (done) => setProgress({ name: file.name, done }) });
        setNote(`${file.name}: ${out.status}, ${out.chunks_created} chunks`);
      } catch (err) {
        setNote(`${file.name}: ${err.message}`);
      }
    }
    setProgress(null);
    reload();
  }
  async function show(doc) {
    const [full, chunks] = await Promise.all([api("GET", `/documents/${encodeURIComponent(doc.id)}`),
      api("GET", `/documents/${encodeURIComponent(doc.id)}/chunks`, { limit: 50 })]);
    setOpen({ doc: full, chunks: chunks.chunks || [] });
  }
  return (
    <Page title="Documents" wide>
      <div class={over ? "drop over" : "drop"} onDragOver={(e) => { e.preventDefault(); setOver(true); }}
        onDragLeave={() => setOver(false)} onDrop={(e) => { e.preventDefault(); setOver(false); upload([...e.dataTransfer.files]); }}>
        <p>Drop files here (PDF, DOCX, HTML, Markdown, text), or</p>
        <label class="button">Choose files<input class="visually-hidden" type="file" multiple onChange={(e) => upload([...e.target.files])} /></label>
      </div>
      {progress ? (
        <p role="status">Uploading {progress.name}: <progress max="1" value={progress.done} aria-label="Upload progress" /> {Math.round(progress.done * 100)}%</p>
      ) : null}
      {note ? <p role="status">{note}</p> : null}
      <Busy busy={busy} />
      <Failure error={error} />
      {data ? (
        <>
          <Table caption="Documents" rows={data.docs} onRow={show} columns={[
            { label: "Title", key: "title" }, { label: "Status", key: "status" }, { label: "Version", key: "version" },
            { label: "Chunks", key: "chunks" }, { label: "Collection", key: "collection" },
            { label: "Added", render: (r) => when(r.created_at) }]} empty="No document yet: drop one above." />
          <h2>Collections</h2>
          <Table caption="Collections" rows={data.collections} columns={[{ label: "Name", key: "name" },
            { label: "Documents", key: "document_count" }, { label: "Chunks", key: "chunk_count" },
            { label: "Pending", key: "pending_count" }, { label: "Failed", key: "failed_count" }]} />
          <h2>Folders</h2>
          <Table caption="Folders" rows={data.folders} columns={[{ label: "Name", key: "name" }, { label: "Path", key: "path" }]}
            empty="No folder." />
        </>
      ) : null}
      {open ? (
        <aside class="detail" aria-label="The document">
          <h2>{open.doc.title}</h2>
          <p class="muted">{open.doc.mime_type} · version {open.doc.version} · {open.doc.chunks} chunks · {open.doc.status}</p>
          <ol class="chunks">
            {open.chunks.map((c) => <li><small class="muted">{c.section}</small><p>{c.text}</p></li>)}
          </ol>
        </aside>
      ) : null}
    </Page>
  );
}
