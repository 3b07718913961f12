// The console's build (issue #52): static files the engram package serves at /console. `make console` runs it;
// the output is committed under layers/engram/engram/console, so running Engram needs no Node.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/console/",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "../layers/engram/engram/console",
    emptyOutDir: true,
    target: "es2022",
    modulePreload: { polyfill: false }, // no inline script: the CSP allows none
    cssCodeSplit: true,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 400,
  },
});
