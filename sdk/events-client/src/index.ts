// @oz0/events-client: what producers of lifecycle events share with the events service.
export { LIFECYCLE_EVENTS, LIFECYCLE_TYPES, isLifecycleType } from "./lifecycle-types.js";
export type { LifecycleSource, LifecycleType, LifecycleTypeInfo } from "./lifecycle-types.js";
