// Provider keys, encrypted at rest with AES-256-GCM under a key-encryption
// key (KEK) from the environment. Write-only from the outside: `use` is for
// the proxy's own upstream calls. A key in use stays decrypted in memory, with
// its scrubber, until no call has used it for KEY_IDLE_MS: decrypting it and
// building its scrubber cost about 40 µs, a tenth of a call's CPU.
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { createScrubber, type SecretScrubber } from "@oz0/serving";
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { ProxyError } from "./proxy-error.js";
import type { ProxyStore, SecretInfo, StoredSecret } from "./proxy-store.js";

const NAME = /^[A-Z][A-Z0-9_]{0,127}$/;
/** How long a decrypted key outlives its last use. */
const KEY_IDLE_MS = 30_000;

/** A provider key for upstream calls, and the scrubber that keeps it out of answers. */
export interface ProviderKey {
  readonly value: string;
  readonly scrubber: SecretScrubber;
}

interface OpenKey {
  /** The row it was decrypted from: a changed secret is read as a new row, and decrypted again. */
  sealed: StoredSecret;
  key: ProviderKey;
  idle: NodeJS.Timeout;
}
const MAX_VALUE_BYTES = 16 * 1024;

/**
 * The KEK from `OZ0_KEK` (base64 of 32 bytes) or `OZ0_KEK_FILE` (a file
 * holding the same base64, or the 32 raw bytes). Undefined when neither is set.
 */
export function loadKek(env: Record<string, string | undefined>): Buffer | undefined {
  if (env.OZ0_KEK) return decodeKek(env.OZ0_KEK, "OZ0_KEK");
  if (env.OZ0_KEK_FILE) {
    let raw: Buffer;
    try {
      raw = readFileSync(env.OZ0_KEK_FILE);
    } catch {
      throw new ProxyError(
        "kek_invalid",
        "OZ0_KEK_FILE cannot be read; point it at a file holding a base64 32-byte key",
      );
    }
    return raw.length === 32 ? raw : decodeKek(raw.toString("utf8").trim(), "OZ0_KEK_FILE");
  }
  return undefined;
}

function decodeKek(text: string, source: string): Buffer {
  const kek = Buffer.from(text.trim(), "base64");
  if (kek.length !== 32) {
    throw new ProxyError(
      "kek_invalid",
      `${source} must hold 32 bytes in base64 (make one with: openssl rand -base64 32)`,
    );
  }
  return kek;
}

export interface KeyVaultOptions {
  store: ProxyStore;
  /** 32 bytes. */
  kek: Buffer;
  now?: () => Date;
}

/**
 * The stored check value (not a secret; its name cannot be set through the
 * API): a shared store holds it encrypted under the KEK of the first replica,
 * so a replica started with another KEK refuses to start instead of writing
 * keys the others cannot read.
 */
const KEK_CHECK_NAME = "oz0.kek-check";
const KEK_CHECK_VALUE = "oz0 llm-proxy key-encryption key check";

export class KeyVault {
  readonly #store: ProxyStore;
  readonly #kek: Buffer;
  readonly #now: () => Date;
  /** Encrypted rows only (never plaintext), to spare a store read per attempt; `null`: no such secret. */
  readonly #sealed = new Map<string, StoredSecret | null>();
  /** Keys in use, decrypted; each leaves after KEY_IDLE_MS without a call, or when its secret changes. */
  readonly #open = new Map<string, OpenKey>();
  /** Bumped by every change, so a read that raced one is not cached. */
  #generation = 0;

  constructor(options: KeyVaultOptions) {
    if (options.kek.length !== 32) throw new ProxyError("kek_invalid", "the key-encryption key must be 32 bytes");
    this.#store = options.store;
    this.#kek = Buffer.from(options.kek);
    this.#now = options.now ?? (() => new Date());
    // Another replica set or deleted a secret: read it again next time.
    options.store.watch((change) => {
      if (change.kind === "secret") this.#forget(change.name);
      else if (change.kind === "reset") this.#forget();
    });
  }

  async set(name: string, value: string): Promise<{ replaced: boolean }> {
    checkName(name);
    if (value.length === 0) throw new ProxyError("invalid_argument", `secret ${name} needs a non-empty value`);
    if (Buffer.byteLength(value) > MAX_VALUE_BYTES)
      throw new ProxyError("invalid_argument", `secret ${name} is longer than ${MAX_VALUE_BYTES} bytes`);
    return this.#put(name, value);
  }

  async #put(name: string, value: string): Promise<{ replaced: boolean }> {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.#kek, iv);
    // The name is authenticated with the value, so a row copied under another name does not decrypt.
    cipher.setAAD(aad(name));
    const ciphertext = Buffer.concat([cipher.update(value, "utf8"), cipher.final()]);
    try {
      return await this.#store.putSecret({ name, iv, ciphertext, tag: cipher.getAuthTag() }, this.#now());
    } finally {
      this.#forget(name);
    }
  }

  /** Drops a cached row (or all), and keeps reads already under way from caching what they read. */
  #forget(name?: string): void {
    this.#generation += 1;
    if (name === undefined) this.#sealed.clear();
    else this.#sealed.delete(name);
    for (const [openName, open] of this.#open) {
      if (name !== undefined && openName !== name) continue;
      clearTimeout(open.idle);
      this.#open.delete(openName);
    }
  }

  async delete(name: string): Promise<void> {
    checkName(name);
    const deleted = await this.#store.deleteSecret(name);
    this.#forget(name);
    if (!deleted) throw new ProxyError("not_found", `no secret named ${name}; ListSecrets shows the names that exist`);
  }

  async list(): Promise<SecretInfo[]> {
    return (await this.#store.listSecrets()).filter((s) => s.name !== KEK_CHECK_NAME);
  }

  async has(name: string): Promise<boolean> {
    return (await this.#sealedRow(name)) !== undefined;
  }

  async #sealedRow(name: string): Promise<StoredSecret | undefined> {
    const cached = this.#sealed.get(name);
    if (cached !== undefined) return cached ?? undefined;
    const generation = this.#generation;
    const row = (await this.#store.getSecret(name)) ?? null;
    if (generation === this.#generation) this.#sealed.set(name, row);
    return row ?? undefined;
  }

  /** The plaintext; undefined when no such secret is set. */
  async reveal(name: string): Promise<string | undefined> {
    return (await this.use(name))?.value;
  }

  /** The key for an upstream call, with its scrubber; undefined when no such secret is set. */
  async use(name: string): Promise<ProviderKey | undefined> {
    const cached = this.#sealed.get(name);
    // Cached (the hot path): no await.
    const stored = cached !== undefined ? (cached ?? undefined) : await this.#sealedRow(name);
    if (!stored) return undefined;
    const open = this.#open.get(name);
    if (open?.sealed === stored) {
      open.idle.refresh();
      return open.key;
    }
    if (open) clearTimeout(open.idle);
    const value = this.#decrypt(name, stored);
    const key: ProviderKey = { value, scrubber: createScrubber(value) };
    const idle = setTimeout(() => {
      if (this.#open.get(name)?.key === key) this.#open.delete(name);
    }, KEY_IDLE_MS);
    idle.unref();
    this.#open.set(name, { sealed: stored, key, idle });
    return key;
  }

  #decrypt(name: string, stored: StoredSecret): string {
    try {
      const decipher = createDecipheriv("aes-256-gcm", this.#kek, stored.iv);
      decipher.setAAD(aad(name));
      decipher.setAuthTag(stored.tag);
      const plain = Buffer.concat([decipher.update(stored.ciphertext), decipher.final()]);
      const text = plain.toString("utf8");
      plain.fill(0);
      return text;
    } catch {
      throw new ProxyError(
        "kek_mismatch",
        `secret ${name} cannot be decrypted with the current KEK; start the proxy with the KEK it was written under, or set the secret again`,
      );
    }
  }

  /**
   * For a store several replicas share: the first to start stores a check
   * value under its KEK; any other must decrypt it, or it refuses to start.
   */
  async checkKek(): Promise<void> {
    if (!(await this.#store.getSecret(KEK_CHECK_NAME))) await this.#put(KEK_CHECK_NAME, KEK_CHECK_VALUE);
    // Read back: of replicas starting at once with different KEKs, the one whose value was overwritten fails here.
    const stored = await this.#store.getSecret(KEK_CHECK_NAME);
    let ok = false;
    try {
      ok = stored !== undefined && this.#decrypt(KEK_CHECK_NAME, stored) === KEK_CHECK_VALUE;
    } catch {
      ok = false;
    }
    if (!ok) {
      throw new ProxyError(
        "kek_mismatch",
        "this proxy's key-encryption key is not the one the other replicas on this database use: give every replica the same OZ0_KEK or OZ0_KEK_FILE",
      );
    }
  }

  /**
   * Stores the provider keys found as files in `dir` (OZ0_SECRETS_DIR, where
   * Kubernetes mounts a Secret): each file whose name is a secret name (upper
   * case, like ANTHROPIC_API_KEY) holds the key, surrounding whitespace
   * trimmed. Other files (`kek`, `providers.json`, Kubernetes' `..data`) are
   * left alone. A key already stored with the same value is not rewritten.
   * Returns the names, never the values.
   */
  async loadDirectory(dir: string): Promise<{ stored: string[]; unchanged: string[] }> {
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      throw new ProxyError(
        "invalid_argument",
        "OZ0_SECRETS_DIR cannot be read; point it at the directory holding one file per provider key",
      );
    }
    const stored: string[] = [];
    const unchanged: string[] = [];
    for (const name of entries.sort()) {
      if (!NAME.test(name)) continue;
      const file = path.join(dir, name);
      let value: string;
      try {
        // Follows Kubernetes' symlinks into ..data; a directory is skipped.
        if (!statSync(file).isFile()) continue;
        value = readFileSync(file, "utf8").trim();
      } catch {
        throw new ProxyError("invalid_argument", `the key file ${name} in OZ0_SECRETS_DIR cannot be read`);
      }
      if (value.length === 0)
        throw new ProxyError("invalid_argument", `the key file ${name} in OZ0_SECRETS_DIR is empty`);
      let current: string | undefined;
      try {
        current = await this.reveal(name);
      } catch {
        current = undefined; // stored under another KEK: the file's value replaces it
      }
      if (current === value) {
        unchanged.push(name);
        continue;
      }
      await this.set(name, value);
      stored.push(name);
    }
    return { stored, unchanged };
  }
}
function aad(name: string): Buffer {
  return Buffer.from(`oz0.llmproxy.secret:${name}`, "utf8");
}

function checkName(name: string): void {
  if (!NAME.test(name)) {
    throw new ProxyError(
      "invalid_argument",
      `secret name "${name.slice(0, 64)}" is invalid: use upper-case letters, digits and _ (for example ANTHROPIC_API_KEY)`,
    );
  }
}
