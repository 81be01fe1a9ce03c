#!/usr/bin/env node
// The console's build: esbuild bundles src/main.tsx into dist/assets with
// content-hashed names, and dist/index.html names them (the orchestrator
// serves assets/ as immutable and index.html as always revalidated).
// `tsc -b` type-checks the sources; this only bundles. `--watch` rebuilds on
// every change (see the README's "Developing").
import * as esbuild from "esbuild";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const watch = process.argv.includes("--watch");
const final = path.join(here, "dist");
// A build writes beside dist/ and then takes its place, so a server reading
// dist/ (tests, `oz0 dev`) never finds it half-written or missing for long.
const dist = watch ? final : path.join(here, `dist.tmp-${process.pid}`);

/** Writes dist/index.html naming the hashed script and stylesheet of this build. */
const indexPlugin = {
  name: "index-html",
  setup(build) {
    build.onEnd((result) => {
      if (result.errors.length > 0) return;
      const outputs = Object.keys(result.metafile.outputs).map((f) => path.relative(dist, path.resolve(here, f)));
      const script = outputs.find((f) => f.endsWith(".js"));
      const style = outputs.find((f) => f.endsWith(".css"));
      const template = readFileSync(path.join(here, "src", "index.html"), "utf8");
      writeFileSync(
        path.join(dist, "index.html"),
        template
          .replace("<!--style-->", style ? `<link rel="stylesheet" href="/${style}">` : "")
          .replace("<!--script-->", `<script type="module" src="/${script}"></script>`),
      );
      if (watch) console.log(`console: rebuilt ${script}`);
    });
  },
};

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
const options = {
  absWorkingDir: here,
  entryPoints: ["src/main.tsx"],
  bundle: true,
  format: "esm",
  target: "es2022",
  platform: "browser",
  outdir: path.join(dist, "assets"),
  entryNames: "[name]-[hash]",
  assetNames: "[name]-[hash]",
  minify: !watch,
  sourcemap: true,
  metafile: true,
  jsx: "automatic",
  jsxImportSource: "preact",
  logLevel: "warning",
  plugins: [indexPlugin],
};
if (watch) {
  const context = await esbuild.context(options);
  await context.watch();
} else {
  try {
    await esbuild.build(options);
    const old = path.join(here, `dist.old-${process.pid}`);
    if (existsSync(final)) renameSync(final, old);
    renameSync(dist, final);
    rmSync(old, { recursive: true, force: true });
  } finally {
    rmSync(dist, { recursive: true, force: true });
  }
}
