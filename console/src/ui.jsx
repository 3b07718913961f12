// Small shared pieces. Everything a user or an agent wrote is rendered as text (Preact escapes it): no
// dangerouslySetInnerHTML anywhere, no link built from stored content.
import { cloneElement } from "preact";
import { useEffect, useId, useState } from "preact/hooks";

/** `load()`'s answer, reloaded when `deps` change: [data, error, busy, reload]. */
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null, busy: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, busy: true }));
    load().then(
      (data) => live && setState({ data, error: null, busy: false }),
      (error) => live && setState({ data: null, error, busy: false }),
    );
    return () => { live = false; };
  }, [...deps, tick]);
  return [state.data, state.error, state.busy, () => setTick((t) => t + 1)];
}

export function Failure({ error }) {
  if (!error) return null;
  const denied = error.status === 403 || error.status === 401;
  return (
    <p class="error" role="alert">
      {denied ? "This key may not see this: " : "Something went wrong: "}
      {error.message}
    </p>
  );
}

export function Busy({ busy }) {
  return busy ? <p class="muted" aria-live="polite">Loading…</p> : null;
}

export function Page({ title, children, wide }) {
  useEffect(() => { document.title = `${title} · Engram console`; }, [title]);
  return (
    <section class={wide ? "page wide" : "page"} aria-labelledby="page-title">
      <h1 id="page-title" tabIndex={-1}>{title}</h1>
      {children}
    </section>
  );
}

export function Table({ caption, columns, rows, empty, onRow }) {
  if (!rows || rows.length === 0) return <p class="muted">{empty || "Nothing here yet."}</p>;
  return (
    <table>
      <caption>{caption}</caption>
      <thead><tr>{columns.map((c) => <th scope="col">{c.label}</th>)}</tr></thead>
      <tbody>
        {rows.map((r, i) => (
          <tr key={r.id || i}>
            {columns.map((c, j) => (
              <td>{j === 0 && onRow ? <button class="link" type="button" onClick={() => onRow(r)}>{cell(c, r)}</button> : cell(c, r)}</td>
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function cell(column, row) {
  const value = column.render ? column.render(row) : row[column.key];
  if (value === null || value === undefined) return "";
  return typeof value === "object" && !value.type ? JSON.stringify(value) : value;
}

/** A labelled control: the label names the control alone (a wrapping label would name it with its options too). */
export function Field({ label, children, hint }) {
  const id = useId();
  const control = cloneElement(children, { id, "aria-describedby": hint ? `${id}-hint` : undefined });
  return (
    <div class="field">
      <label for={id}>{label}</label>
      {control}
      {hint ? <small class="muted" id={`${id}-hint`}>{hint}</small> : null}
    </div>
  );
}
