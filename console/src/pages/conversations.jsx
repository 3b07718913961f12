// Threads with their summaries; schemas, records and a version's changes; files with their dependencies.
import { useState } from "preact/hooks";
import { api, when } from "../api.js";
import { Failure, Field, Page, Table, useLoad } from "../ui.jsx";

function Thread() {
  const [id, setId] = useState("");
  const [thread, setThread] = useState(null);
  const [error, setError] = useState(null);
  async function open(e) {
    e.preventDefault();
    setError(null);
    try {
      setThread(await api("GET", "/threads/messages", { thread_id: id, limit: 200, include_compressed: true }));
    } catch (err) {
      setError(err);
    }
  }
  return (
    <section aria-labelledby="threads">
      <h2 id="threads">Threads</h2>
      <form class="row" onSubmit={open}>
        <Field label="Thread id"><input required value={id} onInput={(e) => setId(e.target.value)} /></Field>
        <button type="submit">Open</button>
      </form>
      <Failure error={error} />
      {thread ? (
        <ol class="messages">
          {thread.messages.map((m) => (
            <li class={m.role}><small class="muted">{m.role} · {when(m.created_at)}{m.compressed ? " · summarised" : ""}</small><p>{m.content}</p></li>
          ))}
        </ol>
      ) : null}
    </section>
  );
}

function diff(before, after) {
  const keys = [...new Set([...Object.keys(before || {}), ...Object.keys(after || {})])].sort();
  return keys.filter((k) => JSON.stringify((before || {})[k]) !== JSON.stringify((after || {})[k]))
    .map((k) => ({ id: k, field: k, before: JSON.stringify((before || {})[k]), after: JSON.stringify((after || {})[k]) }));
}

function Records({ context }) {
  const [schemas, error] = useLoad(() => api("GET", "/schemas"), [context]);
  const [type, setType] = useState(null);
  const [records, setRecords] = useState(null);
  const [versions, setVersions] = useState(null);
  const [problem, setProblem] = useState(null);
  async function pick(schema) {
    setType(schema.type || schema.name);
    setVersions(null);
    try {
      setRecords((await api("POST", "/records/lookup", { type: schema.type || schema.name, limit: 100 })).items || []);
    } catch (err) {
      setProblem(err);
    }
  }
  async function history(record) {
    try {
      setVersions(await api("GET", `/history/${encodeURIComponent(record.id)}`, { limit: 20 }));
    } catch (err) {
      setProblem(err);
    }
  }
  const list = versions ? versions.versions || [] : [];
  return (
    <section aria-labelledby="records">
      <h2 id="records">Records</h2>
      <Failure error={error || problem} />
      {schemas ? <Table caption="Schemas" rows={schemas.schemas} onRow={pick} columns={[
        { label: "Type", render: (r) => r.type || r.name }, { label: "Version", key: "version" }]} empty="No schema yet." /> : null}
      {records ? <Table caption={`Records of ${type}`} rows={records} onRow={history} columns={[
        { label: "Id", key: "id" }, { label: "Version", key: "version" }, { label: "Updated", render: (r) => when(r.updatedAt || r.updated_at) }]} /> : null}
      {list.length > 1 ? (
        <Table caption={`What version ${list[0].version} changed`} rows={diff(list[1].data, list[0].data)} columns={[
          { label: "Field", key: "field" }, { label: "Before", key: "before" }, { label: "After", key: "after" }]} />
      ) : versions ? <p class="muted">One version so far.</p> : null}
    </section>
  );
}

function Files() {
  const [path, setPath] = useState("");
  const [file, setFile] = useState(null);
  const [error, setError] = useState(null);
  async function open(e) {
    e.preventDefault();
    setError(null);
    try {
      const [read, deps] = await Promise.all([api("POST", "/code/read", { path, include_history: true }),
        api("POST", "/code/dependencies", { file_path: path })]);
      setFile({ read, deps });
    } catch (err) {
      setError(err);
    }
  }
  return (
    <section aria-labelledby="files">
      <h2 id="files">Files</h2>
      <form class="row" onSubmit={open}>
        <Field label="Path"><input required value={path} onInput={(e) => setPath(e.target.value)} /></Field>
        <button type="submit">Open</button>
      </form>
      <Failure error={error} />
      {file ? (
        <>
          <pre class="code">{file.read.content ?? "(no such file)"}</pre>
          <h3>Depends on / depended on by</h3>
          <pre class="code">{JSON.stringify(file.deps.dependencies ?? file.deps, null, 2)}</pre>
        </>
      ) : null}
    </section>
  );
}

export function Conversations({ context }) {
  return (
    <Page title="Threads, records, files" wide>
      <Thread />
      <Records context={context} />
      <Files />
    </Page>
  );
}
