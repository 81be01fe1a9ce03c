// Node identities: the orchestrator's node API, served for real on loopback,
// takes a heartbeat only with a service-account token shaped and signed as
// a Kubernetes cluster signs a pod's projected token (the one thing here that
// stands in for the cluster: its key pair and the tokens it would issue),
// and only for the node that token proves. A holder of the node token alone
// cannot register a node, nor one pod's token another pod's id or any URL
// other than the address its heartbeat comes from. The sidecar's side
// (startNodeHeartbeat with OZ0_NODE_IDENTITY_TOKEN_FILE) registers with the
// token file as the kubelet writes it and reads it again when it is renewed.
// The listener is on `::`, as a pod's is, so an IPv4 heartbeat's source
// reaches the check as `::ffff:127.0.0.1` and must be read as the URL's.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SandboxNodeService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { startNodeHeartbeat } from "@oz0/sandbox";
import { NODE_IDENTITY_AUDIENCE, NODE_IDENTITY_HEADER, type RunningServer } from "@oz0/serving";
import { capturingLogger } from "@oz0/serving/testing";
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWTPayload } from "jose";
import { NodeIdentity } from "../src/cluster/node-identity.js";
import { NodePinnedError, type SandboxNode } from "../src/cluster/sandbox-node-registry.js";
import { configFromEnv } from "../src/orchestrator-config.js";
import { startNodeListener } from "../src/rpc/sandbox-node-service.js";
import { eventually } from "./support/eventually.js";

const NODE_TOKEN = "node-token-for-identity-tests-0123456789";
const ISSUER = "https://kubernetes.default.svc.cluster.local";
const POD = "sandbox-7d9f8-abcde";
const POD_UID = "6f1c2a4e-0d0b-4b7e-9a55-3f1f0b2d7c11";
/** The URL at which the test's registry refuses the node, as the real one refuses a pod's token from elsewhere. */
const PINNED_ELSEWHERE = "http://127.0.0.1:7799";

interface ClusterKey {
  privateKey: CryptoKey;
  jwks: { keys: object[] };
  kid: string;
}

async function clusterKey(): Promise<ClusterKey> {
  const { privateKey, publicKey } = await generateKeyPair("RS256");
  const kid = randomUUID();
  return { privateKey, kid, jwks: { keys: [{ ...(await exportJWK(publicKey)), kid, use: "sig", alg: "RS256" }] } };
}

/** A projected service-account token as the cluster issues it to `pod` (the claims of Kubernetes 1.30+). */
function podToken(
  key: ClusterKey,
  overrides: { pod?: string | null; claims?: JWTPayload; expiresIn?: string; aheadSeconds?: number } = {},
) {
  const pod = overrides.pod === undefined ? POD : overrides.pod;
  // A cluster whose clock is ahead of the orchestrator's issues tokens valid from "later".
  const now = Math.floor(Date.now() / 1000) + (overrides.aheadSeconds ?? 0);
  return new SignJWT({
    iss: ISSUER,
    aud: [NODE_IDENTITY_AUDIENCE],
    sub: "system:serviceaccount:oz0:sandbox",
    jti: randomUUID(),
    "kubernetes.io": {
      namespace: "oz0",
      ...(pod === null ? {} : { pod: { name: pod, uid: pod === POD ? POD_UID : randomUUID() } }),
      node: { name: "worker-1", uid: randomUUID() },
      serviceaccount: { name: "sandbox", uid: randomUUID() },
    },
    ...overrides.claims,
  })
    .setProtectedHeader({ alg: "RS256", kid: key.kid })
    .setIssuedAt(now)
    .setNotBefore(now)
    .setExpirationTime(overrides.expiresIn ?? "10m")
    .sign(key.privateKey);
}

void describe("node identities", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-node-identity-"));
  const jwksFile = path.join(dir, "jwks.json");
  const registered: string[] = [];
  const orchestratorLog = capturingLogger();
  let cluster: ClusterKey;
  let otherCluster: ClusterKey;
  let server: RunningServer;
  let client: Client<typeof SandboxNodeService>;

  before(async () => {
    cluster = await clusterKey();
    otherCluster = await clusterKey();
    writeFileSync(jwksFile, JSON.stringify(cluster.jwks));
    server = await startNodeListener({
      registry: {
        register: async (node) => {
          // As the registry does for a pod's token from another URL than its pod's (sandbox-node-registry.test.ts).
          if (node.url === PINNED_ELSEWHERE)
            throw new NodePinnedError({ id: node.id, url: node.url, registeredUrl: "http://10.0.0.7:7701" });
          registered.push(`${node.id} ${node.url} ${node.pod?.uid}`);
          return { ...node, placed: 0 } as SandboxNode;
        },
        staleAfterMs: 15_000,
      },
      nodeToken: NODE_TOKEN,
      identity: new NodeIdentity({ issuer: ISSUER, jwksFile, serviceAccount: "oz0:sandbox" }),
      logger: orchestratorLog.logger,
      host: "::",
      port: 0,
    });
    client = createClient(SandboxNodeService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${server.port}` }));
  });

  after(async () => {
    await server.close({ graceMs: 0 });
    rmSync(dir, { recursive: true, force: true });
  });

  const heartbeat = (token: string | undefined, node: { id?: string; url?: string } = {}, bearer = NODE_TOKEN) =>
    client.heartbeat(
      { nodeId: node.id ?? POD, url: node.url ?? "http://127.0.0.1:7701", capacity: 4, running: 0 },
      {
        headers: {
          authorization: `Bearer ${bearer}`,
          ...(token === undefined ? {} : { [NODE_IDENTITY_HEADER]: token }),
        },
      },
    );

  async function refused(call: Promise<unknown>, code: Code, message: RegExp): Promise<void> {
    const before = registered.length;
    await assert.rejects(call, (error: unknown) => {
      const err = ConnectError.from(error);
      assert.equal(Code[err.code], Code[code], err.rawMessage);
      assert.match(err.rawMessage, message);
      return true;
    });
    assert.equal(registered.length, before, "a refused heartbeat registers nothing");
  }

  void it("registers the pod its token was issued to, at the address its heartbeat comes from", async () => {
    await heartbeat(await podToken(cluster));
    assert.deepEqual(registered.at(-1), `${POD} http://127.0.0.1:7701 ${POD_UID}`);
  });

  void it("refuses a heartbeat with the node token alone, saying what the sidecar needs", async () => {
    await refused(heartbeat(undefined), Code.Unauthenticated, /OZ0_NODE_IDENTITY_TOKEN_FILE/);
  });

  void it("refuses a pod's token for another node id, and for a URL other than where it comes from", async () => {
    const token = await podToken(cluster);
    await refused(heartbeat(token, { id: "sandbox-other-pod" }), Code.PermissionDenied, /not the pod .*sandbox-7d9f8/);
    await refused(
      heartbeat(token, { url: "http://127.0.0.2:7701" }),
      Code.PermissionDenied,
      /not where this heartbeat came from \(127\.0\.0\.1\)/,
    );
    // A name is no address: it could resolve anywhere, so a node advertises its pod's IP.
    await refused(heartbeat(token, { url: "http://localhost:7701" }), Code.PermissionDenied, /not where/);
    // The registry keeps a node at its pod's URL: the same pod's token elsewhere is refused, saying where it is.
    await refused(
      heartbeat(token, { url: PINNED_ELSEWHERE }),
      Code.PermissionDenied,
      /registered by its pod at http:\/\/10\.0\.0\.7:7701/,
    );
  });

  void it("takes a token a little ahead of its clock, and names a clock far behind", async () => {
    const ahead = (seconds: number) => podToken(cluster, { aheadSeconds: seconds });
    await heartbeat(await ahead(20));
    await refused(heartbeat(await ahead(600)), Code.PermissionDenied, /not valid yet by this orchestrator's clock/);
  });

  void it("refuses tokens the sandbox pods' projected volume would not hold", async () => {
    const refusedToken = async (token: Promise<string>, message: RegExp) =>
      refused(heartbeat(await token), Code.PermissionDenied, message);
    // Another service account of the cluster (any pod can have its own token for any audience).
    await refusedToken(
      podToken(cluster, { claims: { sub: "system:serviceaccount:oz0:default" } }),
      /not of the sandbox pods' service account \(system:serviceaccount:oz0:sandbox/,
    );
    await refusedToken(podToken(cluster, { claims: { aud: ["https://kubernetes.default.svc"] } }), /aud claim/);
    await refusedToken(podToken(cluster, { claims: { iss: "https://elsewhere.example" } }), /iss claim/);
    await refusedToken(podToken(otherCluster), /not signed by a key of OZ0_NODE_IDENTITY_JWKS_FILE/);
    await refusedToken(podToken(cluster, { expiresIn: "-1m" }), /expired/);
    // `kubectl create token sandbox --audience oz0-node-api` makes one bound to no pod.
    await refusedToken(podToken(cluster, { pod: null }), /not bound to a pod/);
    const [header, payload] = (await podToken(cluster)).split(".");
    await refusedToken(Promise.resolve(`${header}.${payload}.`), /not signed|not a valid/);
  });

  void it("still needs the node token: a pod's token alone reaches nothing", async () => {
    await assert.rejects(heartbeat(await podToken(cluster), {}, "not-the-node-token-0123456789"), (error: unknown) => {
      assert.equal(ConnectError.from(error).code, Code.Unauthenticated);
      return true;
    });
  });

  void it("reads the cluster's keys again when the file is replaced", async () => {
    const before = await podToken(cluster);
    writeFileSync(jwksFile, JSON.stringify(otherCluster.jwks));
    try {
      await refused(heartbeat(before), Code.PermissionDenied, /not signed by a key/);
      await heartbeat(await podToken(otherCluster));
    } finally {
      writeFileSync(jwksFile, JSON.stringify(cluster.jwks));
    }
  });

  void it("logs refused identities by the address they come from, not by the node ids they name", async () => {
    const before = orchestratorLog.lines.filter((line) => line.code === "NODE_IDENTITY_REFUSED").length;
    const token = await podToken(cluster);
    // A caller chooses the ids: a line per id would be a line per heartbeat.
    for (let i = 0; i < 20; i++) {
      await refused(heartbeat(token, { id: `sandbox-forger-${i}` }), Code.PermissionDenied, /not the pod/);
      await refused(heartbeat(undefined, { id: `sandbox-nobody-${i}` }), Code.Unauthenticated, /TOKEN_FILE/);
    }
    const lines = orchestratorLog.lines.filter((line) => line.code === "NODE_IDENTITY_REFUSED").slice(before);
    assert.ok(lines.length <= 1, JSON.stringify(lines));
    const [line] = orchestratorLog.lines.filter((l) => l.code === "NODE_IDENTITY_REFUSED");
    assert.equal(line!.from, "127.0.0.1");
    assert.match(line!.msg!, /node identity was refused/);
  });

  void it("the heartbeat sidecar's side sends the token file, read again each heartbeat", async () => {
    const tokenFile = path.join(dir, "token");
    writeFileSync(tokenFile, `${await podToken(cluster, { pod: "sandbox-from-file" })}\n`);
    const sidecarLog = capturingLogger();
    const logged = (text: string) => async () =>
      sidecarLog.lines.some((line) => JSON.stringify(line).includes(text)) ? true : undefined;
    const beats = startNodeHeartbeat({
      orchestratorUrls: [`http://127.0.0.1:${server.port}`],
      nodeToken: NODE_TOKEN,
      identityTokenFile: tokenFile,
      nodeId: "sandbox-from-file",
      advertiseUrl: "http://127.0.0.1:7701",
      status: () => ({ capacity: 2, running: 0 }),
      intervalMs: 100,
      logger: sidecarLog.logger,
    });
    try {
      await eventually(
        async () =>
          registered.some((r) => r.startsWith("sandbox-from-file http://127.0.0.1:7701 ")) ? true : undefined,
        "the sidecar's node registered",
      );
      // The kubelet renews the file; a token for another pod put there is refused, and the sidecar says so.
      writeFileSync(tokenFile, await podToken(cluster, { pod: "sandbox-someone-else" }));
      await eventually(logged("not the pod"), "the refusal in the sidecar's log");
      rmSync(tokenFile);
      await eventually(logged("OZ0_NODE_IDENTITY_TOKEN_FILE"), "the missing token file in the sidecar's log");
    } finally {
      await beats.stop();
    }
  });

  void it("takes its settings from the environment, all three or none", () => {
    const base = { OZ0_NODE_TOKEN: NODE_TOKEN };
    const all = {
      ...base,
      OZ0_NODE_IDENTITY_ISSUER: ISSUER,
      OZ0_NODE_IDENTITY_JWKS_FILE: jwksFile,
      OZ0_NODE_IDENTITY_SERVICE_ACCOUNT: "oz0:sandbox",
    };
    assert.deepEqual(configFromEnv(all).nodeIdentity, { issuer: ISSUER, jwksFile, serviceAccount: "oz0:sandbox" });
    assert.equal(configFromEnv(base).nodeIdentity, undefined);
    assert.throws(
      () => configFromEnv({ ...base, OZ0_NODE_IDENTITY_ISSUER: ISSUER }),
      /OZ0_NODE_IDENTITY_JWKS_FILE must be set together with OZ0_NODE_IDENTITY_ISSUER and OZ0_NODE_IDENTITY_SERVICE_ACCOUNT/,
    );
    assert.throws(
      () => new NodeIdentity({ issuer: ISSUER, jwksFile, serviceAccount: "sandbox" }),
      /namespace:name, such as oz0:sandbox/,
    );
    assert.throws(
      () =>
        new NodeIdentity({ issuer: ISSUER, jwksFile: path.join(dir, "missing.json"), serviceAccount: "oz0:sandbox" }),
      /kubectl get --raw \/openid\/v1\/jwks/,
    );
  });
});
