// What bubblewrap is told to mount: hidden paths inside a bound one are
// covered after it, what the session needs deeper inside is bound again
// after that, and the visibility check agrees with the order.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { planMounts } from "../src/bubblewrap-mounts.js";

void describe("bubblewrap mounts", () => {
  // install/                 bound read-only (an installation folder)
  //   node_modules/.bin/h    the harness
  //   home/                  the stack's data directory, inside it
  //     kek                  a file named in the hidden paths
  //     sandbox/sessions/s/work   the session's working directory
  let dir: string;
  let install: string;
  let home: string;
  let root: string;
  let work: string;
  before(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), "oz0-mounts-"));
    install = path.join(dir, "install");
    home = path.join(install, "home");
    root = path.join(home, "sandbox");
    work = path.join(root, "sessions", "s", "work");
    mkdirSync(path.join(install, "node_modules", ".bin"), { recursive: true });
    writeFileSync(path.join(install, "node_modules", ".bin", "h"), "");
    mkdirSync(work, { recursive: true });
    writeFileSync(path.join(home, "kek"), "");
    symlinkSync(install, path.join(dir, "link"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const pairs = (args: string[]): string[] => {
    const out: string[] = [];
    for (let i = 0; i < args.length;) {
      const flag = args[i]!;
      const n = ["--tmpfs", "--proc", "--dev", "--dir", "--remount-ro"].includes(flag) ? 1 : 2;
      out.push([flag, ...args.slice(i + 1, i + 1 + n)].join(" "));
      i += 1 + n;
    }
    return out;
  };

  void it("covers the root, its parent and the hidden paths inside a bound folder, then binds the session's own directory again on top", () => {
    const plan = planMounts({
      binds: [
        { source: install, optional: true },
        { source: work, writable: true },
      ],
      hidden: [path.join(home, "kek"), path.join(dir, "not-there")],
      hiddenUnlessBound: [root, home],
    });
    const mounts = pairs(plan.args);
    const at = (mount: string): number => {
      const index = mounts.indexOf(mount);
      assert(index >= 0, `${mount} in ${mounts.join(" | ")}`);
      return index;
    };
    assert(at(`--ro-bind-try ${install} ${install}`) < at(`--tmpfs ${home}`));
    assert(at(`--tmpfs ${home}`) < at(`--tmpfs ${root}`));
    assert(at(`--tmpfs ${root}`) < at(`--bind ${work} ${work}`));
    assert(at(`--tmpfs ${home}`) < at(`--ro-bind /dev/null ${path.join(home, "kek")}`));
    assert(
      at("--tmpfs /tmp") < at(`--ro-bind-try ${install} ${install}`),
      "the private /tmp first: a bound folder under the node's /tmp stays visible",
    );
    assert.equal(
      mounts.filter((m) => m.includes("not-there")).length,
      0,
      "a hidden path that does not exist needs nothing",
    );

    assert.equal(plan.visible(path.join(install, "node_modules", ".bin", "h")), true);
    assert.equal(plan.visible(path.join(home, "kek")), false);
    assert.equal(plan.visible(path.join(root, "sessions", "other", "work", "x")), false);
    assert.equal(plan.visible(path.join(work, "x")), true);
    assert.equal(plan.visible("/etc/shadow"), false);
  });

  void it("hides where a bind shows a hidden path, through a link too", () => {
    const linked = path.join(dir, "link");
    const plan = planMounts({ binds: [{ source: linked }], hidden: [home] });
    assert(pairs(plan.args).includes(`--tmpfs ${path.join(linked, "home")}`), plan.args.join(" "));
    assert.equal(plan.visible(path.join(linked, "home", "kek")), false);
    assert.equal(plan.visible(path.join(linked, "node_modules", ".bin", "h")), true);
  });

  void it("does not hide the root's parent when it is itself what was bound, but always hides an explicitly hidden path", () => {
    const derived = planMounts({ binds: [{ source: home }], hidden: [], hiddenUnlessBound: [home, "/"] });
    assert.equal(
      pairs(derived.args).some((m) => m.startsWith("--tmpfs") && m !== "--tmpfs /tmp" && m !== "--tmpfs /dev/shm"),
      false,
      derived.args.join(" "),
    );
    assert.equal(derived.visible(path.join(home, "kek")), true);
    const explicit = planMounts({ binds: [{ source: home }], hidden: [home] });
    assert(pairs(explicit.args).includes(`--tmpfs ${home}`));
    assert.equal(explicit.visible(path.join(home, "kek")), false);
  });
  void it("makes /tmp and /dev/shm the session's TMPDIR, and every tmpfs read-only once all is mounted in it", () => {
    const tmp = path.join(dir, "state", "tmp");
    const plan = planMounts({ binds: [{ source: install }], hidden: [home], tmp });
    const mounts = pairs(plan.args);
    assert(mounts.includes(`--bind ${tmp} /tmp`), plan.args.join(" "));
    assert(mounts.includes(`--bind ${tmp} /dev/shm`), plan.args.join(" "));
    assert(!mounts.some((m) => m === "--tmpfs /tmp" || m === "--tmpfs /dev/shm"), plan.args.join(" "));
    const remounts = mounts.filter((m) => m.startsWith("--remount-ro"));
    const covers = mounts.filter((m) => m.startsWith("--tmpfs")).map((m) => m.slice("--tmpfs ".length));
    assert.deepEqual(
      remounts,
      ["/", "/dev", ...covers].map((dest) => `--remount-ro ${dest}`),
    );
    assert.deepEqual(mounts.slice(-remounts.length), remounts, "after every mount");
    assert.equal(plan.visible(path.join(install, "node_modules", ".bin", "h")), true, "a remount hides nothing");
  });
});
