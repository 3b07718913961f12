import "./style.css";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { session } from "./api.js";
import { finishOAuth, SignIn } from "./signin.jsx";
import { Overview } from "./pages/overview.jsx";
import { Memories } from "./pages/memories.jsx";
import { Search } from "./pages/search.jsx";
import { Documents } from "./pages/documents.jsx";
import { GraphPage } from "./pages/graph.jsx";
import { Conversations } from "./pages/conversations.jsx";
import { Audit } from "./pages/audit.jsx";
import { Erasure } from "./pages/erasure.jsx";
import { Usage } from "./pages/usage.jsx";

const PAGES = [
  ["overview", "Overview", Overview],
  ["memories", "Memories", Memories],
  ["search", "Search", Search],
  ["documents", "Documents", Documents],
  ["graph", "Graph", GraphPage],
  ["conversations", "Threads, records, files", Conversations],
  ["audit", "Audit", Audit],
  ["erasure", "Erasure", Erasure],
  ["usage", "Usage", Usage],
];

function route() {
  const name = window.location.hash.replace(/^#\/?/, "").split("?")[0];
  return PAGES.find((p) => p[0] === name) || PAGES[0];
}

function App() {
  const [signedIn, setSignedIn] = useState(Boolean(session.token));
  const [current, setCurrent] = useState(route());
  const [context, setContext] = useState(session.context);
  useEffect(() => {
    const onHash = () => {
      setCurrent(route());
      const heading = document.getElementById("page-title");
      if (heading) heading.focus(); // keyboard and screen reader users land on the new page
    };
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  if (!signedIn) return <SignIn onDone={() => { setSignedIn(true); setContext(session.context); }} />;
  const identity = session.identity || { contexts: [context] };
  const [name, , Component] = current;
  return (
    <div class="shell">
      <a class="skip" href="#content">Skip to content</a>
      <header class="top">
        <span class="brand">Engram</span>
        <label class="context">
          <span>Context</span>
          <select value={context} onChange={(e) => { session.setContext(e.target.value); setContext(e.target.value); }}>
            {identity.contexts.map((c) => <option value={c}>{c}</option>)}
          </select>
        </label>
        <span class="who">{identity.principal} · {identity.key_id}</span>
        <button type="button" onClick={() => { session.clear(); setSignedIn(false); }}>Sign out</button>
      </header>
      <nav aria-label="Console pages">
        <ul>
          {PAGES.map(([id, label]) => (
            <li><a href={`#/${id}`} aria-current={id === name ? "page" : undefined}>{label}</a></li>
          ))}
        </ul>
      </nav>
      <main id="content"><Component key={`${name}:${context}`} identity={identity} context={context} /></main>
    </div>
  );
}

finishOAuth().finally(() => render(<App />, document.getElementById("app")));
