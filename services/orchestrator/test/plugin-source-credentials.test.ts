// A plugin installed from a private repository is often given as a URL with
// its credential in it (`https://x-access-token:…@github.com/org/plugin.git`,
// a deploy token, a CI job's token). The registry kept that URL as the
// plugin's source, and ListPlugins (any viewer) and `oz0 plugin list` showed
// it, so a viewer read the admin's git credential (found by an attacker
// review). The source is now kept without the URL's user and password; the
// clone still uses them. Served here by git's own smart HTTP backend behind
// Basic authentication, so the install is known to have needed them.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { pluginToProto } from "../src/rpc/orchestrator-service.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { commitAll, startTestStack } from "./support/test-stack.js";

const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-plugin-source-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const USER = "oz0-deploy";
const TOKEN = "glpat-Zq8vX3kLm9TtY2wPr4Ns";

/** A plugin with one agent, committed in `scratch/<name>`, and a bare copy of it under `scratch/served`. */
async function servedPlugin(name: string): Promise<void> {
  const dir = path.join(scratch, name);
  mkdirSync(path.join(dir, "agents"), { recursive: true });
  writeFileSync(path.join(dir, "prompt.md"), "You are a plain agent.\n");
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    `name: ${name}\nversion: 0.1.0\nharnesses:\n  - name: fake\n    command: ["oz0-fake-harness"]\n    permissions: true\nagents: [agents/a.yaml]\n`,
  );
  writeFileSync(
    path.join(dir, "agents", "a.yaml"),
    `name: ${name}-agent\nruntime: harness:fake\nmodel:\n  primary: anthropic/x\ninstructions: prompt.md\n`,
  );
  await commitAll(dir, "plugin");
  const bare = path.join(scratch, "served", `${name}.git`);
  execFileSync("git", ["clone", "-q", "--bare", dir, bare]);
}

/** git's smart HTTP backend (a CGI) for the repositories under `scratch/served`, answering USER:TOKEN only. */
async function privateGitServer(
  options: { onRequest?: () => void } = {},
): Promise<{ url: string; close: () => Promise<void> }> {
  const expected = `Basic ${Buffer.from(`${USER}:${TOKEN}`).toString("base64")}`;
  const server = http.createServer((req, res) => {
    options.onRequest?.();
    if (req.headers.authorization !== expected) {
      res.writeHead(401, { "www-authenticate": 'Basic realm="plugins"' }).end();
      req.resume();
      return;
    }
    const url = new URL(req.url ?? "/", "http://git");
    const cgi = spawn("git", ["http-backend"], {
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        GIT_PROJECT_ROOT: path.join(scratch, "served"),
        GIT_HTTP_EXPORT_ALL: "1",
        REQUEST_METHOD: req.method ?? "GET",
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers["content-type"] ?? "",
        ...(req.headers["content-length"] ? { CONTENT_LENGTH: req.headers["content-length"] } : {}),
        ...(req.headers["content-encoding"] ? { HTTP_CONTENT_ENCODING: req.headers["content-encoding"] } : {}),
        ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
        REMOTE_USER: USER,
      },
    });
    req.pipe(cgi.stdin);
    const out: Buffer[] = [];
    cgi.stdout.on("data", (chunk: Buffer) => out.push(chunk));
    cgi.on("close", () => {
      const all = Buffer.concat(out);
      const split = all.indexOf("\r\n\r\n");
      const head = all.subarray(0, split).toString("latin1");
      const body = all.subarray(split + 4);
      let status = 200;
      const headers: Record<string, string> = {};
      for (const line of head.split("\r\n")) {
        const colon = line.indexOf(":");
        const field = line.slice(0, colon).trim().toLowerCase();
        const value = line.slice(colon + 1).trim();
        if (field === "status") status = Number(value.split(" ")[0]);
        else headers[field] = value;
      }
      res.writeHead(status, headers).end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

void test("a plugin installed from a URL holding a credential keeps its source without it, and lists none", async (t) => {
  await servedPlugin("private-plugin");
  const git = await privateGitServer();
  t.after(git.close);
  const store = new SqliteJobStore({ file: ":memory:" });
  const registry = new PluginRegistry({ store, home: path.join(scratch, "home") });

  // Without the credential the repository is closed: the install below needs it.
  await assert.rejects(registry.install({ source: `http://${git.url}/private-plugin.git` }), /git clone .* failed/);

  const installed = await registry.install({ source: `http://${USER}:${TOKEN}@${git.url}/private-plugin.git` });
  assert.equal(installed.plugin.name, "private-plugin");
  assert.equal(installed.plugin.source, `http://${git.url}/private-plugin.git`);
  const listed = (await registry.list()).map(pluginToProto);
  assert.deepEqual(
    listed.map((p) => p.source),
    [`http://${git.url}/private-plugin.git`],
  );
  assert.ok(!JSON.stringify(await store.listPlugins()).includes(TOKEN), "the store keeps no credential");
});

void test("a clone that fails says so without the URL's credential", async (t) => {
  const git = await privateGitServer();
  t.after(git.close);
  const registry = new PluginRegistry({
    store: new SqliteJobStore({ file: ":memory:" }),
    home: path.join(scratch, "home-2"),
  });
  const error = await registry.install({ source: `http://${USER}:${TOKEN}@${git.url}/missing.git` }).then(
    () => assert.fail("installed a repository that is not there"),
    (e: unknown) => e as Error,
  );
  assert.match(error.message, new RegExp(`git clone http://${git.url.replace(/\./g, "\\.")}/missing\\.git failed`));
  assert.ok(!error.message.includes(TOKEN), error.message);
});

/** The command lines of every process of the host that holds `secret` (every local user may read them). */
function commandLinesHolding(secret: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const line = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
      if (line.includes(secret)) found.push(line);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

// The clone ran `git clone http://user:token@host/…`, and git passes the URL on to git-remote-http: while the clone
// ran, every local user, and every session of a `user`- or `none`-mode sandbox on the host, read the admin's git
// credential in /proc/<pid>/cmdline (attacker review). The credential now reaches git in its environment, which only
// its own user may read.
void test("a clone's git processes hold the URL's credential in no command line", async (t) => {
  await servedPlugin("argv-plugin");
  const seen: string[] = [];
  const git = await privateGitServer({ onRequest: () => seen.push(...commandLinesHolding(TOKEN)) });
  t.after(git.close);
  const registry = new PluginRegistry({
    store: new SqliteJobStore({ file: ":memory:" }),
    home: path.join(scratch, "home-3"),
  });
  const installed = await registry.install({ source: `http://${USER}:${TOKEN}@${git.url}/argv-plugin.git` });
  assert.equal(installed.plugin.name, "argv-plugin");
  assert.deepEqual(seen, []);
});

// Given in the URL on oz0's own command line, the credential was every local user's to read while `oz0 plugin
// install` ran, and the command printed it back ("installed … from http://user:token@…"). It is read from standard
// input instead, and the URL on a command line earns a warning.
void test("oz0 plugin install --git-credential-stdin clones with a credential no command line or output holds", async (t) => {
  await servedPlugin("stdin-plugin");
  const seen: string[] = [];
  const git = await privateGitServer({ onRequest: () => seen.push(...commandLinesHolding(TOKEN)) });
  t.after(git.close);
  const stack = await startTestStack({ pick: () => ({ text: "no model call here" }) });
  t.after(() => stack.close());
  const url = `http://${git.url}/stdin-plugin.git`;

  const piped = await stack.cli(["plugin", "install", "--git-credential-stdin", url], { input: `${USER}:${TOKEN}\n` });
  assert.equal(piped.code, 0, piped.stderr);
  assert.equal(piped.stdout.split("\n")[0], `installed plugin stdin-plugin 0.1.0 from ${url}`);
  assert.deepEqual(seen, [], "no process's command line held the credential");
  assert.doesNotMatch(piped.stderr, /oz0: warning: the credential/);

  const inUrl = await stack.cli(["plugin", "install", `http://${USER}:${TOKEN}@${git.url}/stdin-plugin.git`]);
  assert.equal(inUrl.code, 0, inUrl.stderr);
  assert.equal(inUrl.stdout.split("\n")[0], `installed plugin stdin-plugin 0.1.0 from ${url}`);
  assert.match(
    inUrl.stderr,
    /^oz0: warning: the credential in the URL can be read by every user of this machine while oz0 runs \(ps, \/proc\); pipe it in instead: printf %s "\$TOKEN" \| oz0 plugin install --git-credential-stdin /,
  );
  assert.ok(!inUrl.stderr.includes(TOKEN), inUrl.stderr);

  // An SSH URL's `git@` is a login name: no warning (which pointed at --git-credential-stdin, refusing SSH URLs).
  const ssh = await stack.cli(["plugin", "install", "ssh://git@127.0.0.1:1/stdin-plugin.git"]);
  assert.notEqual(ssh.code, 0);
  assert.doesNotMatch(ssh.stderr, /oz0: warning: the credential/);

  const empty = await stack.cli(["plugin", "install", "--git-credential-stdin", url], { input: "" });
  assert.equal(empty.code, 2);
  assert.match(empty.stderr, /no credential on standard input: pipe it in/);
  const twice = await stack.cli(["plugin", "install", "--git-credential-stdin", `http://${USER}@${git.url}/x.git`], {
    input: TOKEN,
  });
  assert.equal(twice.code, 2);
  assert.match(twice.stderr, /the URL has a credential already: give it on standard input alone/);
});

// The credential helper answered whatever host git asked about: a repository that redirects its clone to another
// host (git follows the first request's redirect) made git ask for that host's credential, which it then sent
// there (a review's finding). It answers for the URL's own host alone now.
void test("a clone redirected to another host sends that host no credential", async (t) => {
  await servedPlugin("redirected-plugin");
  const git = await privateGitServer();
  t.after(git.close);
  const sentThere: string[] = [];
  const elsewhere = http.createServer((req, res) => {
    if (req.headers.authorization) sentThere.push(req.headers.authorization);
    res.writeHead(401, { "www-authenticate": 'Basic realm="elsewhere"' }).end();
  });
  await new Promise<void>((resolve) => elsewhere.listen(0, "127.0.0.1", resolve));
  t.after(() => elsewhere.close());
  // On another port: git counts host and port together as the host.
  const elsewhereUrl = `127.0.0.1:${(elsewhere.address() as AddressInfo).port}`;
  const redirecting = http.createServer((req, res) => {
    res.writeHead(302, { location: `http://${elsewhereUrl}${req.url ?? "/"}` }).end();
  });
  await new Promise<void>((resolve) => redirecting.listen(0, "127.0.0.1", resolve));
  t.after(() => redirecting.close());
  const redirectingUrl = `127.0.0.1:${(redirecting.address() as AddressInfo).port}`;
  const registry = new PluginRegistry({
    store: new SqliteJobStore({ file: ":memory:" }),
    home: path.join(scratch, "home-redirect"),
  });
  await assert.rejects(
    registry.install({ source: `http://${USER}:${TOKEN}@${redirectingUrl}/redirected-plugin.git` }),
    /git clone .* failed/,
  );
  assert.deepEqual(sentThere, [], "the other host was sent no credential");
  // The control: at its own host the same credential clones.
  const installed = await registry.install({ source: `http://${USER}:${TOKEN}@${git.url}/redirected-plugin.git` });
  assert.equal(installed.plugin.name, "redirected-plugin");
});
