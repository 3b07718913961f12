// Preview (what would go, per family), request, live progress, and the receipt verified in the browser.
import { useEffect, useState } from "preact/hooks";
import { api } from "../api.js";
import { Failure, Field, Page, Table } from "../ui.jsx";
import { verifyReceipt } from "../verify.js";

function counts(found) {
  const rows = [];
  for (const [family, parts] of Object.entries(found || {})) {
    const records = Object.values(parts.records || {}).reduce((a, b) => a + b, 0);
    const index = Object.values(parts.index || {}).reduce((a, b) => a + b, 0);
    const blobs = Object.values(parts.blobs || {}).reduce((a, b) => a + b, 0);
    rows.push({ id: family, family, records, index, blobs });
  }
  return rows;
}

export function Erasure({ context }) {
  const [scope, setScope] = useState("");
  const [preview, setPreview] = useState(null);
  const [request, setRequest] = useState(null);
  const [status, setStatus] = useState(null);
  const [check, setCheck] = useState(null);
  const [error, setError] = useState(null);
  async function look(e) {
    e.preventDefault();
    setError(null);
    setRequest(null);
    setStatus(null);
    setCheck(null);
    try {
      setPreview(await api("POST", "/erasures", { scope, preview: true }));
    } catch (err) {
      setError(err);
    }
  }
  async function erase() {
    if (!window.confirm(`Erase everything under ${scope}? This cannot be undone.`)) return;
    try {
      setRequest(await api("POST", "/erasures", { scope }));
    } catch (err) {
      setError(err);
    }
  }
  useEffect(() => {
    if (!request || !request.request_id) return undefined;
    let live = true;
    const poll = async () => {
      const now = await api("GET", "/erasures/status", { request_id: request.request_id });
      if (!live) return;
      setStatus(now);
      if (now.receipt) setCheck(await verifyReceipt(now.receipt));
      else setTimeout(poll, 500);
    };
    poll().catch(setError);
    return () => { live = false; };
  }, [request]);
  const download = status && status.receipt
    ? URL.createObjectURL(new Blob([JSON.stringify(status.receipt, null, 2)], { type: "application/json" })) : null;
  return (
    <Page title="Erasure" wide>
      <form class="row" onSubmit={look}>
        <Field label="Scope to erase" hint="A user's region, e.g. org/acme/user/alice">
          <input required value={scope} onInput={(e) => setScope(e.target.value)} />
        </Field>
        <button type="submit">Preview</button>
      </form>
      <Failure error={error} />
      {preview ? (
        <>
          <Table caption="What would be erased" rows={counts(preview.found)} columns={[{ label: "Family", key: "family" },
            { label: "Records", key: "records" }, { label: "Index entries", key: "index" }, { label: "Files", key: "blobs" }]}
            empty="Nothing under this scope." />
          {request ? null : <button type="button" class="danger" onClick={erase}>Erase</button>}
        </>
      ) : null}
      {status ? (
        <p role="status" data-testid="erasure-status">Request {status.request_id}: {status.status}</p>
      ) : null}
      {check ? (
        <p role="status" class={check.valid ? "ok" : "error"} data-testid="receipt-check">
          Receipt {check.valid ? "verified in this browser" : "NOT verified"}: {check.why}
        </p>
      ) : null}
      {download ? <a class="button" href={download} download={`erasure-${status.request_id}.json`}>Download the receipt</a> : null}
    </Page>
  );
}
