// The patch is made by git in the sandbox's own process, outside any
// isolation, over a tree the harness made. These build the trees a hostile
// harness would leave behind and check what reaches the patch.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { collectArtifacts, snapshotInitialState } from "../src/artifact-collector.js";

/** Forty hex characters standing for a secret of the node's: they must never reach a patch. */
const NODE_SECRET = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

void describe("collectArtifacts over a hostile tree", () => {
  let top: string;
  let nodeFile: string;
  before(() => {
    top = mkdtempSync(path.join(os.tmpdir(), "oz0-artifacts-"));
    nodeFile = path.join(top, "node-secret");
    writeFileSync(nodeFile, `${NODE_SECRET}\n`);
  });
  after(() => rmSync(top, { recursive: true, force: true }));

  /** A working directory and a snapshot repository beside it, outside it. */
  function session(name: string): { gitDir: string; workingDir: string } {
    const workingDir = path.join(top, name, "work");
    mkdirSync(workingDir, { recursive: true });
    return { gitDir: path.join(top, name, "snapshot.git"), workingDir };
  }

  /** A folder git takes for a repository whose `refs/heads/main` is a link to the node's file. */
  function nestLinkedRepository(folder: string): void {
    mkdirSync(path.join(folder, ".git", "refs", "heads"), { recursive: true });
    mkdirSync(path.join(folder, ".git", "objects"));
    writeFileSync(path.join(folder, ".git", "HEAD"), "ref: refs/heads/main\n");
    symlinkSync(nodeFile, path.join(folder, ".git", "refs", "heads", "main"));
    writeFileSync(path.join(folder, "inside.txt"), "in the nested repository\n");
  }

  void it("leaves nested repositories out, never reading their refs, and says so", async () => {
    const paths = session("linked-ref");
    writeFileSync(path.join(paths.workingDir, "kept.txt"), "before\n");
    await snapshotInitialState(paths);
    writeFileSync(path.join(paths.workingDir, "kept.txt"), "after\n");
    nestLinkedRepository(path.join(paths.workingDir, "sub"));
    // One inside a folder that is itself untracked, and one whose .git is a file naming another repository.
    mkdirSync(path.join(paths.workingDir, "made", "deeper"), { recursive: true });
    writeFileSync(path.join(paths.workingDir, "made", "plain.txt"), "plain\n");
    nestLinkedRepository(path.join(paths.workingDir, "made", "deeper"));
    const elsewhere = path.join(top, "elsewhere");
    execFileSync("git", ["init", "-q", elsewhere]);
    execFileSync("git", [
      "-C",
      elsewhere,
      "-c",
      "user.name=x",
      "-c",
      "user.email=x@x",
      "commit",
      "-q",
      "--allow-empty",
      "-m",
      "x",
    ]);
    const elsewhereHead = execFileSync("git", ["-C", elsewhere, "rev-parse", "HEAD"], { encoding: "utf8" }).trim();
    mkdirSync(path.join(paths.workingDir, "pointer"));
    writeFileSync(path.join(paths.workingDir, "pointer", ".git"), `gitdir: ${path.join(elsewhere, ".git")}\n`);

    const artifacts = await collectArtifacts({ ...paths, artifactPaths: [], maxBytes: 1 << 20, baseline: "snapshot" });

    assert.match(artifacts.patch ?? "", /-before\n\+after/);
    assert.match(artifacts.patch ?? "", /made\/plain\.txt/);
    for (const leaked of [NODE_SECRET, NODE_SECRET.slice(0, 7), elsewhereHead.slice(0, 7), "Subproject commit"]) {
      assert.ok(!(artifacts.patch ?? "").includes(leaked), `the patch holds ${leaked}:\n${artifacts.patch}`);
    }
    assert.ok(!(artifacts.patch ?? "").includes("inside.txt"), "a nested repository's files are not in the patch");
    assert.match(
      artifacts.error ?? "",
      /made\/deeper\/, pointer\/, sub\/ left out of the patch: a folder with a \.git of its own is a separate repository/,
    );
  });

  void it("leaves out a nested repository the initial state already held", async () => {
    const paths = session("nested-from-start");
    nestLinkedRepository(path.join(paths.workingDir, "vendored"));
    await snapshotInitialState(paths);
    writeFileSync(path.join(paths.workingDir, "vendored", "inside.txt"), "changed\n");
    writeFileSync(path.join(paths.workingDir, "new.txt"), "new\n");
    const artifacts = await collectArtifacts({ ...paths, artifactPaths: [], maxBytes: 1 << 20, baseline: "snapshot" });
    assert.match(artifacts.patch ?? "", /\+new/);
    assert.ok(!(artifacts.patch ?? "").includes(NODE_SECRET.slice(0, 7)), artifacts.patch);
    assert.match(artifacts.error ?? "", /vendored\/ left out of the patch/);
  });

  void it("gives up on a tree that hangs git (a FIFO for a nested HEAD) after its time limit, with the reason", async () => {
    const paths = session("fifo-head");
    mkdirSync(path.join(paths.workingDir, "stuck", ".git", "refs"), { recursive: true });
    mkdirSync(path.join(paths.workingDir, "stuck", ".git", "objects"));
    execFileSync("mkfifo", [path.join(paths.workingDir, "stuck", ".git", "HEAD")]);
    writeFileSync(path.join(paths.workingDir, "named.txt"), "named\n");
    const artifacts = await collectArtifacts({
      ...paths,
      gitTimeoutMs: 1_500,
      artifactPaths: ["named.txt"],
      maxBytes: 1 << 20,
      baseline: "empty",
    });
    assert.equal(artifacts.patch, "");
    assert.match(artifacts.error ?? "", /git ls-files took longer than 2 s and was stopped \(a FIFO/);
    // The named files are still read: only the patch is given up.
    assert.deepEqual(
      artifacts.files?.map((f) => f.path),
      ["named.txt"],
    );
  });
});
