// No Docker engine runs here, so the images are checked by reading
// deploy/Dockerfile: pinned Node 24 LTS slim, production-only dependencies,
// numeric non-root user, a gRPC HEALTHCHECK, bubblewrap and the harness
// plugins in the sandbox image, and ports that match the manifests.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { chain, inherited, readDockerfile } from "./support/dockerfile.js";
import { deployDir } from "./support/render.js";
import { ports, services } from "./support/workloads.js";

const file = readDockerfile(path.join(deployDir, "Dockerfile"));
const stageNames = new Set(file.stages.map((s) => s.name));
const root = path.resolve(deployDir, "..");

void describe("deploy/Dockerfile", () => {
  void it("builds on Node 24 LTS slim pinned to a full version", () => {
    const image = file.args.NODE_IMAGE;
    assert.match(image ?? "", /^node:24\.\d+\.\d+-(bookworm|trixie|bullseye)-slim(@sha256:[0-9a-f]{64})?$/);
    for (const stage of file.stages) {
      assert.ok(stage.from === "${NODE_IMAGE}" || stageNames.has(stage.from), `stage ${stage.name} FROM ${stage.from}`);
    }
  });

  void it("runs the Node major that .nvmrc and the CI (.ci/run) name, one that package.json's engines allow", () => {
    const major = readFileSync(path.join(root, ".nvmrc"), "utf8").trim();
    assert.match(file.args.NODE_IMAGE ?? "", new RegExp(`^node:${major}\\.`));
    assert.match(
      readFileSync(path.join(root, ".ci", "run"), "utf8"),
      new RegExp(`^NODE_VERSION=${major}\\.\\d+\\.\\d+$`, "m"),
    );
    const engines = (JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as { engines: { node: string } })
      .engines.node;
    assert.match(engines, /^>=\d+$/);
    assert.ok(Number(major) >= Number(engines.slice(2)), `${major} is outside engines ${engines}`);
  });

  void it("installs with npm ci and builds in a builder stage", () => {
    const build = file.stages.find((s) => s.name === "build")!;
    const runs = build.instructions
      .filter((i) => i.keyword === "RUN")
      .map((i) => i.args)
      .join("\n");
    assert.match(runs, /npm ci\b/);
    assert.match(runs, /npm run build\b/);
  });

  for (const name of services) {
    void describe(`target ${name}`, () => {
      const stages = chain(file, name);
      const own = inherited(file, name);

      void it("exists and starts the service's compiled entry point", () => {
        assert.equal(stages[0]?.name, name);
        const entry = own.filter((i) => i.keyword === "ENTRYPOINT" || i.keyword === "CMD").at(-1);
        assert.ok(entry, "ENTRYPOINT or CMD");
        const argv = JSON.parse(entry.args) as string[];
        assert.deepEqual(argv, ["node", `services/${name}/dist/main.js`]);
      });

      void it("runs as a numeric non-root user", () => {
        const user = own.filter((i) => i.keyword === "USER").at(-1);
        assert.ok(user, "USER");
        const m = /^(\d+)(?::(\d+))?$/.exec(user.args);
        assert.ok(m, `USER ${user.args} is numeric`);
        assert.notEqual(Number(m[1]), 0);
        if (m[2] !== undefined) assert.notEqual(Number(m[2]), 0);
        // Nothing runs as root after the user switch.
        const after = own.slice(own.indexOf(user) + 1);
        assert.ok(!after.some((i) => i.keyword === "USER"));
      });

      void it("copies only a production-only dependency tree for its workspace", () => {
        const copies = stages[0]!.instructions.filter((i) => i.keyword === "COPY");
        const fromStages = copies.map((c) => /--from=(\S+)/.exec(c.args)?.[1]).filter((s): s is string => !!s);
        assert.ok(fromStages.length > 0);
        for (const from of fromStages) {
          assert.ok(!["build", "prune"].includes(from), `copies from ${from}, which has dev dependencies`);
          const runs = chain(file, from)[0]!
            .instructions.filter((i) => i.keyword === "RUN")
            .map((i) => i.args)
            .join("\n");
          assert.match(runs, /npm ci --omit=dev\b/);
          assert.match(runs, new RegExp(`--workspace @oz0/${name}\\b`));
        }
        // No package manager runs in the final stages.
        for (const s of chain(file, name).filter((x) => !x.from.startsWith("$") || x.name === "runtime")) {
          for (const i of s.instructions.filter((x) => x.keyword === "RUN"))
            assert.doesNotMatch(i.args, /\bnpm (ci|install)\b/);
        }
      });

      void it("has a HEALTHCHECK that asks grpc.health.v1 through deploy/healthcheck.mjs", () => {
        const health = own.filter((i) => i.keyword === "HEALTHCHECK").at(-1);
        assert.ok(health);
        assert.match(health.args, /CMD \["node", "([^"]+healthcheck\.mjs)"/);
        const script = /"([^"]+healthcheck\.mjs)"/.exec(health.args)![1];
        assert.ok(
          own.some(
            (i) => i.keyword === "COPY" && i.args.includes("deploy/healthcheck.mjs") && i.args.endsWith(script!),
          ),
        );
      });

      void it("exposes the port the manifests probe, and sets it", () => {
        const expose = own.filter((i) => i.keyword === "EXPOSE").map((i) => i.args);
        assert.deepEqual(expose, [String(ports[name])]);
        const env = own
          .filter((i) => i.keyword === "ENV")
          .map((i) => i.args)
          .join(" ");
        assert.match(env, new RegExp(`OZ0_PORT=${ports[name]}\\b`));
        assert.match(env, /OZ0_HOST=0\.0\.0\.0/);
      });

      void it("declares its writable paths as volumes (read-only root friendly)", () => {
        const volumes = own.filter((i) => i.keyword === "VOLUME").flatMap((i) => JSON.parse(i.args) as string[]);
        assert.ok(volumes.includes("/tmp"));
        assert.ok(
          volumes.some((v) => v.startsWith("/var/lib/oz0")),
          "a data directory volume",
        );
      });
    });
  }

  void it("puts bubblewrap, git and the harness plugins in the sandbox image only", () => {
    const aptIn = (target: string): string =>
      inherited(file, target)
        .filter((i) => i.keyword === "RUN" && i.args.includes("apt-get install"))
        .map((i) => i.args)
        .join("\n");
    assert.match(aptIn("sandbox"), /\bbubblewrap\b/);
    assert.match(aptIn("sandbox"), /\bgit\b/);
    for (const other of services.filter((s) => s !== "sandbox")) assert.doesNotMatch(aptIn(other), /bubblewrap/);
    const from = /--from=(\S+)/.exec(
      chain(file, "sandbox")[0]!.instructions.find((i) => i.keyword === "COPY" && i.args.includes("--from="))!.args,
    )![1]!;
    const runs = chain(file, from)[0]!
      .instructions.map((i) => i.args)
      .join("\n");
    for (const plugin of ["harness-claude", "harness-acp"]) {
      assert.match(runs, new RegExp(`--workspace @oz0/${plugin}\\b`));
      assert.ok(existsSync(path.join(root, "plugins", plugin)), `plugins/${plugin} exists`);
      assert.doesNotMatch(runs, new RegExp(`rm -rf[^\\n]*\\bplugins\\b`));
    }
  });

  void it("ships the web console's bundle in the orchestrator image only, without its sources", () => {
    const runsOf = (stage: string): string =>
      chain(file, stage)
        .flatMap((s) => s.instructions.filter((i) => i.keyword === "RUN").map((i) => i.args))
        .join("\n");
    // The bundle is made by the build (npm run build runs the console's `bundle` script) and kept by prune, which drops sources.
    assert.equal(
      (
        JSON.parse(readFileSync(path.join(root, "console", "package.json"), "utf8")) as {
          scripts: Record<string, string>;
        }
      ).scripts.bundle !== undefined,
      true,
    );
    const prune = runsOf("prune");
    assert.match(prune, /find [^\n]*\bconsole\b[^\n]*-name src/);
    const removals = prune
      .split(/&&|\n/)
      .map((command) => command.trim())
      .filter((command) => command.startsWith("rm -rf"));
    assert.ok(!removals.some((command) => command.split(/\s+/).includes("console")), removals.join(" | "));
    // The orchestrator finds it through its @oz0/console dependency, installed with its workspace.
    const orchestratorPackage = JSON.parse(
      readFileSync(path.join(root, "services", "orchestrator", "package.json"), "utf8"),
    ) as { dependencies: Record<string, string> };
    assert.ok(orchestratorPackage.dependencies["@oz0/console"], "the orchestrator depends on @oz0/console");
    const fromOf = (target: string): string =>
      /--from=(\S+)/.exec(
        chain(file, target)[0]!.instructions.find((i) => i.keyword === "COPY" && i.args.includes("--from="))!.args,
      )![1]!;
    assert.doesNotMatch(
      chain(file, fromOf("orchestrator"))[0]!
        .instructions.map((i) => i.args)
        .join("\n"),
      /rm -rf[^\n]*\bconsole\b/,
    );
    for (const other of services.filter((s) => s !== "orchestrator")) {
      assert.match(
        chain(file, fromOf(other))[0]!
          .instructions.map((i) => i.args)
          .join("\n"),
        /rm -rf[^\n]*\bconsole\b/,
        `${other} carries no console`,
      );
    }
  });

  void it("keeps node_modules, build output and VCS files out of the build context", () => {
    const ignore = readFileSync(path.join(deployDir, "Dockerfile.dockerignore"), "utf8")
      .split("\n")
      .map((l) => l.trim());
    for (const entry of ["**/node_modules", "**/dist", ".git"]) assert.ok(ignore.includes(entry), entry);
  });
});

void describe("deploy/healthcheck.mjs", () => {
  void it("needs nothing but Node's built-in modules", () => {
    const source = readFileSync(path.join(deployDir, "healthcheck.mjs"), "utf8");
    const imports = [...source.matchAll(/^import .* from "([^"]+)";$/gm)].map((m) => m[1]);
    assert.ok(imports.length > 0);
    for (const i of imports) assert.match(i!, /^node:/);
  });
});

void it("the README runs no image alone as if it were a stack, and points to the way the images run together", () => {
  const readme = readFileSync(path.join(deployDir, "README.md"), "utf8");
  // `docker run … oz0/orchestrator:dev` alone could not start (no sandbox, LLM proxy or credential).
  for (const run of readme.match(/^docker run .*$/gm) ?? []) {
    if (!/oz0\/orchestrator/.test(run)) continue;
    for (const needed of ["OZ0_SANDBOX_URLS", "OZ0_LLM_PROXY_URL", "OZ0_SERVICE_TOKEN"])
      assert.ok(run.includes(needed), `${run} sets ${needed}`);
  }
  assert.match(readme, /^kubectl apply -k deploy\/k8s\/overlays\/dev$/m);
  assert.ok(existsSync(path.join(deployDir, "k8s", "overlays", "dev", "generate-secrets.sh")));
});
