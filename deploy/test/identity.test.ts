// Identity in the manifests (issue 19; the design every service implements):
//  - each service's container gets its own credential (OZ0_SERVICE_TOKEN, from
//    a Secret of its own) and the SHA-256 digests of exactly the peers it
//    accepts (OZ0_PEER_<NAME>_SHA256): events accepts the orchestrator and the
//    LLM proxy (Publish); the sandbox and the LLM proxy accept the
//    orchestrator; the orchestrator accepts no service (people on its
//    public API, the node token on its node API);
//  - people's roles and OIDC (OZ0_AUTH_CONFIG) reach the orchestrator and the
//    events service, as a mounted file;
//  - the LLM proxy's old shared admin token is gone from everything;
//  - no credential is committed: the dev overlay's are generated at deploy
//    time by overlays/dev/generate-secrets.sh into a gitignored directory.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { before, describe, it } from "node:test";
import { parse, parseAllDocuments } from "yaml";
import { NODE_IDENTITY_AUDIENCE, stackCredentialNames } from "@oz0/serving";
import {
  deployDir,
  generatedDir,
  generateSecretsScript,
  k8sDir,
  overlayDirs,
  preparedCopy,
  render,
  type K8sObject,
} from "./support/render.js";
import {
  ingressWithoutFromFindings,
  peerDigestFindings,
  publicApiFindings,
  sandboxToOrchestratorFindings,
  serviceTokenFindings,
} from "./support/identity-checks.js";
import { allContainers, container, containerEnv, workload, workloads, type Any } from "./support/workloads.js";

const DIGESTS = /^oz0-service-token-digests(-[a-z0-9]+)?$/;
const AUTH_CONFIG_MAP = /^oz0-auth(-[a-z0-9]+)?$/;
/** Built from parts, so this file does not name it: it must appear nowhere. */
const RETIRED_ADMIN_TOKEN = ["OZ0", "LLM", "PROXY", "ADMIN", "TOKEN"].join("_");
const RETIRED_ADMIN_SECRET = ["oz0", "llm", "proxy", "admin"].join("-");
const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");
const decode = (base64: string): string => Buffer.from(base64.replace(/\s/g, ""), "base64").toString("utf8");
/** Each service's own credential, and those for one audience alone (`orchestrator-for-sandbox`): a Secret each. */
const credentials = stackCredentialNames();

for (const dir of overlayDirs()) {
  const overlay = path.basename(dir);
  void describe(`identity in ${overlay}`, () => {
    let objects: K8sObject[] = [];
    before(() => {
      objects = render(dir);
    });

    void it("gives each service's container its own credential, from a Secret of its own, and no other container one", () => {
      assert.deepEqual(serviceTokenFindings(objects), []);
    });

    void it("gives each container exactly the peer digests the design says, from the digests ConfigMap", () => {
      assert.deepEqual(peerDigestFindings(objects), []);
      // Spelled out: the design's table.
      const digestsOf = (name: string): string[] =>
        (container(workload(objects, name).pod, name).env ?? [])
          .map((e: Any) => e.name as string)
          .filter((n: string) => n.startsWith("OZ0_PEER_"))
          .sort();
      assert.deepEqual(digestsOf("orchestrator"), []);
      assert.deepEqual(digestsOf("sandbox"), ["OZ0_PEER_ORCHESTRATOR_SHA256"]);
      assert.deepEqual(digestsOf("llm-proxy"), ["OZ0_PEER_ORCHESTRATOR_SHA256"]);
      assert.deepEqual(digestsOf("events"), ["OZ0_PEER_LLM_PROXY_SHA256", "OZ0_PEER_ORCHESTRATOR_SHA256"]);
    });

    void it("lets the orchestrator and the events service, and no other, read people's roles (OZ0_AUTH_CONFIG) from the oz0-auth ConfigMap", () => {
      const readers: string[] = [];
      for (const w of workloads(objects)) {
        for (const c of allContainers(w.pod)) {
          const file = containerEnv(objects, c).OZ0_AUTH_CONFIG;
          if (file === undefined) continue;
          readers.push(c.name);
          const mount = (c.volumeMounts ?? []).find((m: Any) => file.startsWith(`${m.mountPath}/`));
          assert.ok(mount, `${w.name}/${c.name}: OZ0_AUTH_CONFIG ${file} is on a mount`);
          assert.equal(mount.readOnly, true);
          const volume = w.pod.volumes.find((v: Any) => v.name === mount.name);
          assert.ok(
            volume?.configMap && AUTH_CONFIG_MAP.test(volume.configMap.name),
            `${w.name}: the mount is the oz0-auth ConfigMap`,
          );
          const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === volume.configMap.name) as Any;
          const key = path.relative(mount.mountPath, file);
          assert.ok(typeof cm?.data?.[key] === "string", `oz0-auth has ${key}`);
          const config = parse(cm.data[key]) as Any;
          // The fields the services accept (lib/serving's auth config): anything else refuses the start.
          assert.deepEqual(
            Object.keys(config).filter((k) => !["oidc", "roles", "tokens"].includes(k)),
            [],
          );
          for (const role of Object.keys(config.roles ?? {}))
            assert.ok(["admin", "operator", "approver", "viewer"].includes(role), role);
          for (const t of config.tokens ?? []) assert.match(t.sha256, /^[0-9a-f]{64}$/, "static tokens by digest only");
          if (config.oidc) for (const field of ["issuer", "audience"]) assert.ok(config.oidc[field], `oidc.${field}`);
        }
      }
      assert.deepEqual(readers.sort(), ["events", "orchestrator"]);
    });

    void it("has no trace of the retired shared admin token", () => {
      const text = JSON.stringify(objects);
      assert.ok(!text.includes(RETIRED_ADMIN_TOKEN), `${RETIRED_ADMIN_TOKEN} is rendered`);
      assert.ok(!text.includes(RETIRED_ADMIN_SECRET), `${RETIRED_ADMIN_SECRET} is rendered`);
    });
  });
}

void describe("dev's generated credentials, as rendered", () => {
  let objects: K8sObject[] = [];
  before(() => {
    objects = render(path.join(k8sDir, "overlays", "dev"));
  });

  void it("gives each service a token of its own, the orchestrator one for sandboxes, and the digests ConfigMap their SHA-256", () => {
    const digests = objects.find((o) => o.kind === "ConfigMap" && DIGESTS.test(o.metadata.name)) as Any;
    assert.ok(digests, "a generated oz0-service-token-digests ConfigMap");
    const tokens = new Set<string>();
    for (const service of credentials) {
      const secret = objects.find(
        (o) => o.kind === "Secret" && new RegExp(`^oz0-${service}-token-[a-z0-9]+$`).test(o.metadata.name),
      ) as Any;
      assert.ok(secret, `a generated oz0-${service}-token Secret`);
      assert.deepEqual(Object.keys(secret.data), ["token"]);
      const token = decode(secret.data.token);
      assert.ok(
        token.length >= 32 && !/\s/.test(token),
        `${service}'s token: ${token.length} characters, no whitespace`,
      );
      tokens.add(token);
      assert.equal(digests.data[service], sha256(token), `${service}'s digest is the SHA-256 of its token, exactly`);
    }
    assert.equal(tokens.size, credentials.length, "no two credentials are the same token");
  });
});

void describe("overlays/dev/generate-secrets.sh", () => {
  const read = (dir: string, file: string): string => readFileSync(path.join(generatedDir(dir), file), "utf8");
  const token = (dir: string, service: string): string => /^token=(.*)$/m.exec(read(dir, `${service}-token.env`))![1]!;
  let first = "";
  let second = "";
  before(() => {
    first = preparedCopy();
    second = preparedCopy();
  });

  void it("writes every credential the dev overlay reads, readable by its owner only", () => {
    const dir = generatedDir(first);
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    const files = readdirSync(dir).sort();
    assert.deepEqual(files, [
      "admin-token",
      "auth.yaml",
      "events-token.env",
      "kek",
      "llm-proxy-token.env",
      "orchestrator-for-sandbox-token.env",
      "orchestrator-token.env",
      "sandbox-token.env",
      "service-token-digests.env",
    ]);
    for (const f of files) assert.equal(statSync(path.join(dir, f)).mode & 0o077, 0, `${f} is private`);
    const digests = Object.fromEntries(
      read(first, "service-token-digests.env")
        .trim()
        .split("\n")
        .map((l) => l.split("=") as [string, string]),
    );
    for (const service of credentials) assert.equal(digests[service], sha256(token(first, service)));
    assert.equal(Buffer.from(read(first, "kek"), "base64").length, 32);
    const auth = parse(read(first, "auth.yaml")) as Any;
    assert.deepEqual(auth.roles, { admin: { users: ["dev-admin"] } });
    assert.deepEqual(auth.tokens, [{ user: "dev-admin", sha256: sha256(read(first, "admin-token")) }]);
  });

  void it("makes new credentials for every deployment, keeps them when run again, and replaces them with --force", () => {
    for (const service of credentials)
      assert.notEqual(token(first, service), token(second, service), `${service}: the same token twice`);
    assert.notEqual(read(first, "kek"), read(second, "kek"));
    const before = Object.fromEntries(credentials.map((s) => [s, token(second, s)]));
    const kek = read(second, "kek");
    execFileSync("bash", [generateSecretsScript(second)], { stdio: "pipe" });
    for (const service of credentials)
      assert.equal(token(second, service), before[service], `${service}: a re-run kept the token`);
    assert.equal(read(second, "kek"), kek);
    execFileSync("bash", [generateSecretsScript(second), "--force"], { stdio: "pipe" });
    for (const service of credentials)
      assert.notEqual(token(second, service), before[service], `${service}: --force made a new token`);
    const digests = read(second, "service-token-digests.env");
    for (const service of credentials)
      assert.ok(
        digests.includes(`${service}=${sha256(token(second, service))}`),
        `${service}'s digest follows its new token`,
      );
  });
});

void describe("the README's credential script for prod", () => {
  void it("creates every token Secret and digest key prod reads, each digest the SHA-256 of its Secret's token", (t) => {
    // The script as the README shows it, run with a kubectl that records what it is asked to create.
    const readme = readFileSync(path.join(k8sDir, "README.md"), "utf8");
    const script = /The service credentials, for example[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1];
    assert.ok(script, "deploy/k8s/README.md shows the credential script");
    const work = mkdtempSync(path.join(os.tmpdir(), "oz0-kubectl-"));
    t.after(() => rmSync(work, { recursive: true, force: true }));
    const calls = withRecordingKubectl(script, { work });
    const literals = (args: string[]): Map<string, string> =>
      new Map(
        args
          .filter((a) => a.startsWith("--from-literal="))
          .map((a) => a.slice("--from-literal=".length))
          .map((a) => [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)]),
      );
    const secrets = new Map<string, string>();
    let digests = new Map<string, string>();
    for (const args of calls) {
      const at = args.indexOf("create");
      if (args[at + 1] === "secret") secrets.set(args[at + 3]!, literals(args).get("token")!);
      if (args[at + 1] === "configmap" && args[at + 2] === "oz0-service-token-digests") digests = literals(args);
    }
    for (const [name, token] of secrets) {
      const key = /^oz0-(.+)-token$/.exec(name)![1]!;
      assert.equal(digests.get(key), sha256(token), `the digest under ${key} is ${name}'s`);
    }
    // Every token Secret and digest key the prod overlays read is among them.
    for (const dir of overlayDirs().filter((d) => path.basename(d).startsWith("prod"))) {
      for (const w of workloads(render(dir))) {
        for (const c of allContainers(w.pod)) {
          for (const e of (c.env ?? []) as Any[]) {
            const secret = e.valueFrom?.secretKeyRef;
            if (secret && /^oz0-.*-token$/.test(secret.name))
              assert.ok(secrets.has(secret.name), `${path.basename(dir)}: ${w.name} reads ${secret.name}`);
            const digest = e.valueFrom?.configMapKeyRef;
            if (digest && DIGESTS.test(digest.name))
              assert.ok(digests.has(digest.key), `${path.basename(dir)}: ${w.name} reads digest ${digest.key}`);
          }
        }
      }
    }
    assert.ok(secrets.has("oz0-orchestrator-for-sandbox-token"), "the orchestrator's credential for sandboxes");
  });
});

void describe("node identities in prod", () => {
  const prods = overlayDirs().filter((d) => path.basename(d).startsWith("prod"));

  for (const dir of prods) {
    void it(`${path.basename(dir)}: only node-heartbeat holds the pod's token for the node API, where it reads it`, () => {
      const objects = render(dir);
      const sandbox = workload(objects, "sandbox");
      const identityVolumes = new Set(
        ((sandbox.pod.volumes ?? []) as Any[])
          .filter((v) =>
            (v.projected?.sources ?? []).some((s: Any) => s.serviceAccountToken?.audience === NODE_IDENTITY_AUDIENCE),
          )
          .map((v) => v.name as string),
      );
      assert.equal(identityVolumes.size, 1, "one projected token for the node API");
      const [volume] = identityVolumes;
      const token = ((sandbox.pod.volumes as Any[]).find((v) => v.name === volume).projected.sources as Any[]).find(
        (s) => s.serviceAccountToken,
      ).serviceAccountToken;
      assert.ok(token.expirationSeconds <= 3600, "short-lived (the kubelet renews it)");
      for (const w of workloads(objects)) {
        for (const c of allContainers(w.pod)) {
          const mount = ((c.volumeMounts ?? []) as Any[]).find(
            (m) => w.name === sandbox.name && identityVolumes.has(m.name),
          );
          if (w.name === "sandbox" && c.name === "node-heartbeat") {
            assert.ok(mount?.readOnly, "node-heartbeat mounts it read-only");
            assert.equal(
              containerEnv(objects, c).OZ0_NODE_IDENTITY_TOKEN_FILE,
              path.posix.join(mount.mountPath, token.path),
              "the sidecar reads the projected file",
            );
            assert.equal(
              (c.env as Any[]).find((e) => e.name === "OZ0_NODE_ID")?.valueFrom?.fieldRef?.fieldPath,
              "metadata.name",
              "its node id is the pod's name, which the token proves",
            );
          } else {
            assert.equal(mount, undefined, `${w.name}/${c.name} must not mount the node identity token`);
          }
        }
      }
      // Nothing else in the pod hands it a token of the service account.
      assert.equal(sandbox.pod.automountServiceAccountToken, false);
      assert.equal(sandbox.pod.shareProcessNamespace ?? false, false);
    });

    void it(`${path.basename(dir)}: the orchestrators check it against the operator's ConfigMap, for the sandbox pods' service account`, () => {
      const objects = render(dir);
      const orchestrator = workload(objects, "orchestrator");
      const c = container(orchestrator.pod, "orchestrator");
      const env = c.env as Any[];
      const issuer = env.find((e) => e.name === "OZ0_NODE_IDENTITY_ISSUER")?.valueFrom?.configMapKeyRef;
      assert.deepEqual({ name: issuer?.name, key: issuer?.key }, { name: "oz0-node-identity", key: "issuer" });
      const jwksFile = env.find((e) => e.name === "OZ0_NODE_IDENTITY_JWKS_FILE")?.value as string;
      const mount = (c.volumeMounts as Any[]).find((m) => jwksFile.startsWith(`${m.mountPath}/`));
      const volume = (orchestrator.pod.volumes as Any[]).find((v) => v.name === mount?.name);
      assert.equal(volume?.configMap?.name, "oz0-node-identity", "the JWKS file is the ConfigMap's");
      assert.ok(
        (volume.configMap.items as Any[]).some(
          (i) => i.key === "jwks.json" && path.posix.join(mount.mountPath, i.path) === jwksFile,
        ),
        "its jwks.json key at OZ0_NODE_IDENTITY_JWKS_FILE",
      );
      // `$(POD_NAMESPACE):sandbox`, POD_NAMESPACE from the downward API and defined before it.
      const account = env.findIndex((e) => e.name === "OZ0_NODE_IDENTITY_SERVICE_ACCOUNT");
      const namespace = env.findIndex((e) => e.valueFrom?.fieldRef?.fieldPath === "metadata.namespace");
      assert.ok(namespace >= 0 && namespace < account, "the namespace comes from the downward API, before it");
      assert.equal(
        env[account].value,
        `$(${env[namespace].name}):${workload(objects, "sandbox").pod.serviceAccountName}`,
      );
    });
  }

  void it("the README's script writes that ConfigMap from the cluster's discovery document and keys", (t) => {
    const readme = readFileSync(path.join(k8sDir, "README.md"), "utf8");
    const script = /The ConfigMap, made again when the cluster's signing keys rotate[\s\S]*?```sh\n([\s\S]*?)```/.exec(
      readme,
    )?.[1];
    assert.ok(script, "deploy/k8s/README.md shows the node identity script");
    const work = mkdtempSync(path.join(os.tmpdir(), "oz0-node-identity-"));
    t.after(() => rmSync(work, { recursive: true, force: true }));
    const cwd = path.join(work, "cwd");
    mkdirSync(cwd);
    // What an API server answers (compact JSON, as it sends it).
    const jwks = JSON.stringify({ keys: [{ use: "sig", kty: "RSA", kid: "k1", alg: "RS256", n: "AQAB", e: "AQAB" }] });
    const issuer = "https://kubernetes.default.svc.cluster.local";
    const discovery = JSON.stringify({
      issuer,
      jwks_uri: "https://172.18.0.2:6443/openid/v1/jwks",
      response_types_supported: ["id_token"],
      subject_types_supported: ["public"],
      id_token_signing_alg_values_supported: ["RS256"],
    });
    writeFileSync(path.join(work, "jwks"), jwks);
    writeFileSync(path.join(work, "discovery"), discovery);
    const calls = withRecordingKubectl(script, {
      work,
      cwd,
      answers: [
        `"get --raw /openid/v1/jwks") cat "${work}/jwks" ;;`,
        `"get --raw /.well-known/openid-configuration") cat "${work}/discovery" ;;`,
        `*"create configmap"*) cp jwks.json "${work}/created-jwks.json" ;;`,
        `"apply -f -") cat > /dev/null ;;`,
      ],
    });
    const create = calls.find((args) => args.includes("create"))!;
    assert.deepEqual(create.slice(0, 5), ["-n", "oz0", "create", "configmap", "oz0-node-identity"]);
    assert.ok(create.includes(`--from-literal=issuer=${issuer}`), create.join(" "));
    assert.ok(create.includes("--from-file=jwks.json"), create.join(" "));
    assert.equal(readFileSync(path.join(work, "created-jwks.json"), "utf8").trim(), jwks);
    assert.ok(
      calls.some((args) => args.join(" ") === "apply -f -"),
      "applied, so running it again replaces it",
    );
    assert.deepEqual(readdirSync(cwd), [], "the keys file is removed");
  });
});

/**
 * Runs a script of the README with a `kubectl` that records each call's
 * arguments (returned, one array per call) and answers as `answers` say
 * (`case "$*"` branches), in `work/bin`.
 */
function withRecordingKubectl(script: string, o: { work: string; cwd?: string; answers?: string[] }): string[][] {
  const bin = path.join(o.work, "bin");
  mkdirSync(bin);
  const log = path.join(o.work, "calls");
  writeFileSync(
    path.join(bin, "kubectl"),
    [
      "#!/bin/sh",
      // One write per call: the stages of a pipe run at once, and two appends each would interleave.
      `line=$(printf '%s\\t' "$@"); printf '%s\\n' "$line" >> "${log}"`,
      `case "$*" in`,
      ...(o.answers ?? []).map((answer) => `  ${answer}`),
      "esac",
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  execFileSync("bash", ["-euo", "pipefail", "-c", script], {
    ...(o.cwd ? { cwd: o.cwd } : {}),
    env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}` },
    stdio: "pipe",
  });
  return readFileSync(log, "utf8")
    .trim()
    .split("\n")
    .map((line) => line.split("\t").filter(Boolean));
}

/**
 * The files of deploy/ that are or would be committed: tracked, or new and
 * not ignored (outside a checkout: every file but generated ones and
 * dependencies).
 */
function committedFiles(): string[] {
  const repo = path.resolve(deployDir, "..");
  const git = spawnSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "deploy"], {
    cwd: repo,
    encoding: "utf8",
  });
  if (git.status === 0 && git.stdout.length > 0) {
    // Tracked files deleted in the working tree are not there to read.
    return git.stdout
      .split("\0")
      .filter(Boolean)
      .map((f) => path.join(repo, f))
      .filter((f) => existsSync(f));
  }
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name === "node_modules" || e.name === "generated") continue;
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(p);
    }
  };
  walk(deployDir);
  return out;
}

function gitIgnores(file: string): boolean | undefined {
  const result = spawnSync("git", ["check-ignore", "-q", file], { cwd: deployDir });
  return result.status === 0 ? true : result.status === 1 ? false : undefined;
}

/** What a committed credential would look like: the services' own form, a KEK, a digest-length hex, a PEM key. */
const CREDENTIAL_SHAPES = [
  /\boz0_[A-Za-z0-9_-]{32,}/,
  /[A-Za-z0-9+/]{40,}={1,2}/,
  /\b[0-9a-f]{64}\b/,
  /-----BEGIN [A-Z ]*PRIVATE KEY-----/,
];
/** Committed files a secretGenerator may read: not credentials (provider names and kinds only). */
const NOT_CREDENTIALS = new Set([path.join(k8sDir, "overlays", "dev", "llm-proxy-keys", "providers.json")]);

void describe("no credential is committed", () => {
  const files = committedFiles();

  void it("commits no Secret object and no credential-shaped string anywhere under deploy/", () => {
    assert.ok(files.length > 30, `${files.length} files`);
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      const where = path.relative(deployDir, file);
      for (const shape of CREDENTIAL_SHAPES)
        assert.doesNotMatch(text, shape, `${where} holds something shaped like a credential`);
      if (!/\.ya?ml$/.test(file)) continue;
      for (const doc of parseAllDocuments(text)) {
        const value = doc.toJS() as Any;
        assert.notEqual(value?.kind, "Secret", `${where} commits a Secret`);
      }
    }
  });

  void it("has every secretGenerator read generated, gitignored files, never literals", () => {
    const kustomizations = files.filter((f) => path.basename(f) === "kustomization.yaml");
    let sources = 0;
    for (const file of kustomizations) {
      const k = parse(readFileSync(file, "utf8")) as Any;
      for (const generator of k.secretGenerator ?? []) {
        const where = `${path.relative(deployDir, file)} secretGenerator ${generator.name}`;
        assert.equal(generator.literals, undefined, `${where}: literals are committed values`);
        for (const source of [...(generator.files ?? []), ...(generator.envs ?? [])] as string[]) {
          sources += 1;
          const target = path.resolve(
            path.dirname(file),
            source.includes("=") ? source.slice(source.indexOf("=") + 1) : source,
          );
          if (NOT_CREDENTIALS.has(target)) {
            const providers = JSON.parse(readFileSync(target, "utf8")) as { providers: Array<Record<string, unknown>> };
            for (const p of providers.providers)
              assert.deepEqual(Object.keys(p).sort(), ["kind", "name"], `${source}: provider names and kinds only`);
            continue;
          }
          assert.ok(target.split(path.sep).includes("generated"), `${where}: ${source} is not a generated file`);
          assert.ok(!files.includes(target), `${where}: ${source} is committed`);
          assert.notEqual(gitIgnores(target), false, `${where}: git does not ignore ${source}`);
        }
      }
    }
    assert.ok(sources >= 5, "the dev overlay's generated sources were found");
  });

  void it("mentions the retired shared admin token in no file under deploy/", () => {
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      assert.ok(
        !text.includes(RETIRED_ADMIN_TOKEN) && !text.includes(RETIRED_ADMIN_SECRET),
        `${path.relative(deployDir, file)} names the retired admin token`,
      );
    }
  });

  void it("keeps the generated credentials out of image builds", () => {
    const ignore = readFileSync(path.join(deployDir, "Dockerfile.dockerignore"), "utf8")
      .split("\n")
      .map((l) => l.trim());
    assert.ok(ignore.includes("deploy/k8s/overlays/*/generated"));
  });
});

void describe("the identity checks catch mistakes", () => {
  let prod: K8sObject[] = [];
  before(() => {
    prod = render(path.join(k8sDir, "overlays", "prod"));
  });
  /** A copy of prod, changed by `change`. */
  const broken = (change: (objects: Any[]) => void): K8sObject[] => {
    const copy = structuredClone(prod) as Any[];
    change(copy);
    return copy;
  };
  const policy = (objects: Any[], name: string): Any =>
    objects.find((o) => o.kind === "NetworkPolicy" && o.metadata.name === name);
  const pod = (objects: Any[], name: string): Any =>
    objects.find((o) => ["Deployment", "StatefulSet"].includes(o.kind) && o.metadata.name === name).spec.template.spec;

  void it("prod as rendered has no finding", () => {
    for (const check of [
      ingressWithoutFromFindings,
      publicApiFindings,
      sandboxToOrchestratorFindings,
      peerDigestFindings,
      serviceTokenFindings,
    ]) {
      assert.deepEqual(check(prod), [], check.name);
    }
  });

  void it("an ingress rule without `from` (the old public rule)", () => {
    const objects = broken((o) =>
      policy(o, "orchestrator").spec.ingress.unshift({ ports: [{ protocol: "TCP", port: 7700 }] }),
    );
    assert.match(ingressWithoutFromFindings(objects).join("\n"), /orchestrator ingress\[0\] has no "from"/);
    assert.match(publicApiFindings(objects).join("\n"), /7700 is open to every pod/);
  });

  void it("the oz0 namespace labelled a client: its sandbox pods would reach 7700", () => {
    const objects = broken((o) => (o.find((x) => x.kind === "Namespace").metadata.labels["oz0.dev/client"] = "true"));
    assert.match(publicApiFindings(objects).join("\n"), /sandbox pods reach the orchestrator's public API/);
  });

  void it("7700 open to every namespace, or to sandbox pods", () => {
    const any = broken((o) => policy(o, "orchestrator").spec.ingress[0].from.push({ namespaceSelector: {} }));
    assert.match(publicApiFindings(any).join("\n"), /not one of the client selectors/);
    const sandbox = broken((o) =>
      policy(o, "orchestrator").spec.ingress[1].ports.push({ protocol: "TCP", port: 7700 }),
    );
    assert.match(sandboxToOrchestratorFindings(sandbox).join("\n"), /admits sandbox pods at the orchestrator's 7700/);
    assert.match(publicApiFindings(sandbox).join("\n"), /sandbox pods reach the orchestrator's public API/);
  });

  void it("sandbox egress to the orchestrator's public port, or to all its ports", () => {
    const old = broken((o) => (policy(o, "sandbox").spec.egress[0].ports = [{ protocol: "TCP", port: 7700 }]));
    const findings = sandboxToOrchestratorFindings(old).join("\n");
    assert.match(findings, /lets sandbox pods reach the orchestrator's 7700/);
    assert.match(findings, /heartbeats cannot reach/);
    const all = broken((o) => delete policy(o, "sandbox").spec.egress[0].ports);
    assert.match(sandboxToOrchestratorFindings(all).join("\n"), /lets sandbox pods reach the orchestrator's 7700/);
  });

  void it("a peer digest too many, one missing, or one from the wrong key", () => {
    const extra = broken((o) =>
      pod(o, "sandbox").containers[0].env.push({
        name: "OZ0_PEER_LLM_PROXY_SHA256",
        valueFrom: { configMapKeyRef: { name: "oz0-service-token-digests", key: "llm-proxy" } },
      }),
    );
    assert.match(
      peerDigestFindings(extra).join("\n"),
      /sandbox\/sandbox has OZ0_PEER_LLM_PROXY_SHA256, OZ0_PEER_ORCHESTRATOR_SHA256, the design says OZ0_PEER_ORCHESTRATOR_SHA256$/m,
    );
    const missing = broken(
      (o) =>
        (pod(o, "events").containers[0].env = pod(o, "events").containers[0].env.filter(
          (e: Any) => e.name !== "OZ0_PEER_LLM_PROXY_SHA256",
        )),
    );
    assert.match(peerDigestFindings(missing).join("\n"), /events\/events has .*, the design says/);
    // The sandbox's, which events no longer accepts: a sandbox node's credential says no job's session ended.
    const sandboxPublishes = broken((o) =>
      pod(o, "events").containers[0].env.push({
        name: "OZ0_PEER_SANDBOX_SHA256",
        valueFrom: { configMapKeyRef: { name: "oz0-service-token-digests", key: "sandbox" } },
      }),
    );
    assert.match(
      peerDigestFindings(sandboxPublishes).join("\n"),
      /events\/events has .*OZ0_PEER_SANDBOX_SHA256.*, the design says/,
    );
    const wrongKey = broken(
      (o) =>
        (pod(o, "llm-proxy").containers[0].env.find(
          (e: Any) => e.name === "OZ0_PEER_ORCHESTRATOR_SHA256",
        ).valueFrom.configMapKeyRef.key = "sandbox"),
    );
    assert.match(
      peerDigestFindings(wrongKey).join("\n"),
      /llm-proxy\/llm-proxy OZ0_PEER_ORCHESTRATOR_SHA256 does not come from/,
    );
    // The orchestrator's general credential, where sandboxes must accept only the one for them.
    const general = broken(
      (o) =>
        (pod(o, "sandbox").containers[0].env.find(
          (e: Any) => e.name === "OZ0_PEER_ORCHESTRATOR_SHA256",
        ).valueFrom.configMapKeyRef.key = "orchestrator"),
    );
    assert.match(
      peerDigestFindings(general).join("\n"),
      /sandbox\/sandbox OZ0_PEER_ORCHESTRATOR_SHA256 does not come from oz0-service-token-digests, key orchestrator-for-sandbox/,
    );
    const sidecar = broken((o) =>
      pod(o, "sandbox").containers[1].env.push({ name: "OZ0_PEER_ORCHESTRATOR_SHA256", value: "0".repeat(64) }),
    );
    assert.match(
      peerDigestFindings(sidecar).join("\n"),
      /sandbox\/node-heartbeat has OZ0_PEER_ORCHESTRATOR_SHA256, the design says none/,
    );
  });

  void it("a service reading another's token, or the sidecar holding one", () => {
    const borrowed = broken(
      (o) =>
        (pod(o, "sandbox").containers[0].env.find(
          (e: Any) => e.name === "OZ0_SERVICE_TOKEN",
        ).valueFrom.secretKeyRef.name = "oz0-orchestrator-token"),
    );
    assert.match(
      serviceTokenFindings(borrowed).join("\n"),
      /sandbox\/sandbox: OZ0_SERVICE_TOKEN is not key "token" of its own Secret/,
    );
    const sidecar = broken((o) =>
      pod(o, "sandbox").containers[1].env.push({
        name: "OZ0_SERVICE_TOKEN",
        valueFrom: { secretKeyRef: { name: "oz0-sandbox-token", key: "token" } },
      }),
    );
    assert.match(serviceTokenFindings(sidecar).join("\n"), /sandbox\/node-heartbeat holds a service token/);
    // Sending sandboxes the general credential: a session that read it there could set the proxy's keys.
    const oneForAll = broken(
      (o) =>
        (pod(o, "orchestrator").containers[0].env = pod(o, "orchestrator").containers[0].env.filter(
          (e: Any) => e.name !== "OZ0_SERVICE_TOKEN_FOR_SANDBOX",
        )),
    );
    assert.match(
      serviceTokenFindings(oneForAll).join("\n"),
      /orchestrator\/orchestrator: OZ0_SERVICE_TOKEN_FOR_SANDBOX is not key "token" of its own Secret oz0-orchestrator-for-sandbox-token/,
    );
    const stray = broken((o) =>
      pod(o, "llm-proxy").containers[0].env.push({
        name: "OZ0_SERVICE_TOKEN_FOR_EVENTS",
        valueFrom: { secretKeyRef: { name: "oz0-orchestrator-token", key: "token" } },
      }),
    );
    assert.match(
      serviceTokenFindings(stray).join("\n"),
      /llm-proxy\/llm-proxy holds OZ0_SERVICE_TOKEN_FOR_EVENTS, which the design does not give it/,
    );
  });
});
