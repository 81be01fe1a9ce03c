// How a sandbox node proves which pod it is (Kubernetes): its heartbeat
// sidecar sends the pod's projected service-account token, issued for this
// audience, in this header beside the node token. The sidecar (@oz0/sandbox's
// node-heartbeat.ts), the orchestrators' check (their cluster/node-identity.ts)
// and the manifests' projected volume (deploy/k8s) name the same two values.

/** The audience of the projected token (`serviceAccountToken.audience`): no other service accepts a token for it. */
export const NODE_IDENTITY_AUDIENCE = "oz0-node-api";
/** The gRPC metadata header a heartbeat carries the token in. */
export const NODE_IDENTITY_HEADER = "oz0-node-identity";
