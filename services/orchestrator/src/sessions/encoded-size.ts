// How many bytes a message's binary encoding takes, without encoding it:
// what protobuf-es's toBinary() would return the length of (the same
// presence rules, packed lists, map entries, groups, unknown fields, and
// google.protobuf.Struct fields held as JSON objects), counted as it walks
// the message rather than written. The orchestrator weighs each message a
// sandbox node sends against the session's byte budget; encoding each one
// again to learn its length cost about 1.4% of its CPU per job (issue 24).
import { ScalarType, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";

type Sizer = (message: Record<string, unknown>) => number;

const sizers = new WeakMap<DescMessage, Sizer>();

/** The byte length of `toBinary(schema, message)` (unknown fields included, as toBinary writes them). */
export function encodedSize(schema: DescMessage, message: Message): number {
  return sizerOf(schema)(message as unknown as Record<string, unknown>);
}

function sizerOf(desc: DescMessage): Sizer {
  let sizer = sizers.get(desc);
  if (sizer) return sizer;
  const fields: Sizer[] = [];
  sizer = (message) => {
    let bytes = 0;
    for (let i = 0; i < fields.length; i++) bytes += fields[i]!(message);
    const unknown = message.$unknown as { no: number; wireType: number; data: Uint8Array }[] | undefined;
    if (unknown !== undefined)
      for (let i = 0; i < unknown.length; i++) bytes += tagSize(unknown[i]!.no) + unknown[i]!.data.byteLength;
    return bytes;
  };
  // Registered before its fields, so a message type that holds itself finds this one.
  sizers.set(desc, sizer);
  for (const field of desc.fields) fields.push(fieldSizer(field));
  return sizer;
}

function fieldSizer(field: DescField): Sizer {
  const local = field.localName;
  const tag = tagSize(field.number);
  switch (field.fieldKind) {
    case "scalar":
    case "enum": {
      const type = field.fieldKind === "enum" ? ScalarType.INT32 : field.scalar;
      const size = scalarSizer(type);
      if (field.oneof) return oneofSizer(field, (value) => tag + size(value));
      if (field.presence !== IMPLICIT) return explicitSizer(local, (value) => tag + size(value));
      const isZero = zeroTest(field);
      return (message) => {
        const value = message[local];
        return isZero(value) ? 0 : tag + size(value);
      };
    }
    case "message": {
      const size = childSizer(field, tag, messageValueSizer(field, !field.oneof));
      return field.oneof ? oneofSizer(field, size) : explicitSizer(local, size);
    }
    case "list": {
      if (field.listKind === "message") {
        const size = childSizer(field, tag, messageValueSizer(field, false));
        return (message) => {
          const items = message[local] as unknown[];
          let bytes = 0;
          for (let i = 0; i < items.length; i++) bytes += size(items[i]);
          return bytes;
        };
      }
      const size = scalarSizer(field.listKind === "enum" ? ScalarType.INT32 : field.scalar);
      if (field.packed)
        return (message) => {
          const items = message[local] as unknown[];
          if (items.length === 0) return 0;
          let bytes = 0;
          for (let i = 0; i < items.length; i++) bytes += size(items[i]);
          return tag + varintSize(bytes) + bytes;
        };
      return (message) => {
        const items = message[local] as unknown[];
        let bytes = 0;
        for (let i = 0; i < items.length; i++) bytes += tag + size(items[i]);
        return bytes;
      };
    }
    case "map": {
      const keySize = mapKeySizer(field.mapKey);
      const valueSize =
        field.mapKind === "message"
          ? lengthDelimited(messageValueSizer(field, false))
          : scalarSizer(field.mapKind === "enum" ? ScalarType.INT32 : field.scalar);
      return (message) => {
        const record = message[local] as Record<string, unknown>;
        let bytes = 0;
        for (const key of Object.keys(record)) {
          // Key and value are fields 1 and 2 of the entry, each with a one-byte tag.
          const entry = 1 + keySize(key) + 1 + valueSize(record[key]);
          bytes += tag + varintSize(entry) + entry;
        }
        return bytes;
      };
    }
  }
}

/** The field's presence when it has none of its own (proto3 scalars without `optional`): written unless zero. */
const IMPLICIT = 2;

function explicitSizer(local: string, size: (value: unknown) => number): Sizer {
  return (message) => {
    const value = message[local];
    return value !== undefined && Object.prototype.hasOwnProperty.call(message, local) ? size(value) : 0;
  };
}

function oneofSizer(field: DescField, size: (value: unknown) => number): Sizer {
  const oneof = field.oneof!.localName;
  const local = field.localName;
  return (message) => {
    const selected = message[oneof] as { case: string | undefined; value?: unknown };
    return selected.case === local ? size(selected.value) : 0;
  };
}

/** A message field's value with its tag: length-prefixed, or between group tags (delimited encoding). */
function childSizer(field: DescField, tag: number, size: (value: unknown) => number): (value: unknown) => number {
  if ("delimitedEncoding" in field && field.delimitedEncoding) return (value) => 2 * tag + size(value);
  return (value) => {
    const bytes = size(value);
    return tag + varintSize(bytes) + bytes;
  };
}

function lengthDelimited(size: (value: unknown) => number): (value: unknown) => number {
  return (value) => {
    const bytes = size(value);
    return varintSize(bytes) + bytes;
  };
}

/**
 * A message field's local value's encoded size, as protobuf-es holds it: a google.protobuf.Struct as a JSON object
 * (outside google.protobuf.Value), a wrapper type as its scalar when singular outside a oneof, else the message
 * (undefined, in a list or map, written as an empty one).
 */
function messageValueSizer(field: DescField, unwrapsWrappers: boolean): (value: unknown) => number {
  const child = field.message!;
  if (child.typeName === "google.protobuf.Struct" && field.parent.typeName !== "google.protobuf.Value")
    return jsonStructSize;
  const wrapped = child.fields[0];
  if (unwrapsWrappers && WRAPPERS.has(child.typeName) && wrapped?.fieldKind === "scalar") {
    const size = scalarSizer(wrapped.scalar);
    const isZero = zeroTest(wrapped);
    // The wrapper's one field, `value` (number 1, a one-byte tag), written unless zero.
    return (value) => (value === undefined || isZero(value) ? 0 : 1 + size(value));
  }
  return (value) => (value === undefined ? 0 : sizerOf(child)(value as Record<string, unknown>));
}

const WRAPPERS = new Set([
  "google.protobuf.DoubleValue",
  "google.protobuf.FloatValue",
  "google.protobuf.Int64Value",
  "google.protobuf.UInt64Value",
  "google.protobuf.Int32Value",
  "google.protobuf.UInt32Value",
  "google.protobuf.BoolValue",
  "google.protobuf.StringValue",
  "google.protobuf.BytesValue",
]);

/** google.protobuf.Struct from its JSON object: `map<string, Value> fields = 1`. */
function jsonStructSize(json: unknown): number {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return 0;
  let bytes = 0;
  const record = json as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    const value = jsonValueSize(record[key]);
    const keyBytes = Buffer.byteLength(key);
    const entry = 1 + varintSize(keyBytes) + keyBytes + 1 + varintSize(value) + value;
    bytes += 1 + varintSize(entry) + entry;
  }
  return bytes;
}

/** google.protobuf.Value from a JSON value: one of null (1), number (2), string (3), bool (4), struct (5), list (6). */
function jsonValueSize(json: unknown): number {
  switch (typeof json) {
    case "number":
      return 1 + 8;
    case "string": {
      const bytes = Buffer.byteLength(json);
      return 1 + varintSize(bytes) + bytes;
    }
    case "boolean":
      return 1 + 1;
    case "object": {
      if (json === null) return 1 + 1;
      if (Array.isArray(json)) {
        // ListValue: `repeated Value values = 1`.
        let list = 0;
        for (const item of json as unknown[]) {
          const value = jsonValueSize(item);
          list += 1 + varintSize(value) + value;
        }
        return 1 + varintSize(list) + list;
      }
      const struct = jsonStructSize(json);
      return 1 + varintSize(struct) + struct;
    }
    default:
      // What JSON has no value for (undefined, a function): an empty Value, as protobuf-es writes it.
      return 0;
  }
}

function zeroTest(field: DescField): (value: unknown) => boolean {
  if (field.fieldKind === "enum") {
    const zero = field.enum.values[0]!.number;
    return (value) => value === zero;
  }
  switch (field.fieldKind === "scalar" ? field.scalar : undefined) {
    case ScalarType.BOOL:
      return (value) => value === false;
    case ScalarType.STRING:
      return (value) => value === "";
    case ScalarType.BYTES:
      return (value) => value instanceof Uint8Array && value.byteLength === 0;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (value) => Object.is(value, 0);
    default:
      // Loose, as protobuf-es's: 0n, 0 and "0".
      return (value) => value == 0;
  }
}

/** A map key's size with the value it has as an object key (a string) converted to the key's type, as written. */
function mapKeySizer(type: ScalarType): (key: string) => number {
  const size = scalarSizer(type);
  switch (type) {
    case ScalarType.STRING:
      return size;
    case ScalarType.BOOL:
      return () => 1;
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return (key) => size(BigInt(key));
    default:
      return (key) => size(Number.parseInt(key));
  }
}

/** A scalar value's size without its tag. */
function scalarSizer(type: ScalarType): (value: unknown) => number {
  switch (type) {
    case ScalarType.STRING:
      return (value) => {
        const bytes = Buffer.byteLength(value as string);
        return varintSize(bytes) + bytes;
      };
    case ScalarType.BYTES:
      return (value) => {
        const bytes = (value as Uint8Array).byteLength;
        return varintSize(bytes) + bytes;
      };
    case ScalarType.BOOL:
      return () => 1;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return () => 8;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return () => 4;
    case ScalarType.INT32:
      // A negative int32 is written as its 64-bit two's complement: ten bytes.
      return (value) => ((value as number) < 0 ? 10 : varintSize(value as number));
    case ScalarType.UINT32:
      return (value) => varintSize((value as number) >>> 0);
    case ScalarType.SINT32:
      return (value) => varintSize((((value as number) << 1) ^ ((value as number) >> 31)) >>> 0);
    case ScalarType.INT64:
    case ScalarType.UINT64:
      return (value) => varint64Size(BigInt.asUintN(64, BigInt(value as bigint | string | number)));
    case ScalarType.SINT64:
      return (value) => {
        const n = BigInt.asIntN(64, BigInt(value as bigint | string | number));
        return varint64Size(BigInt.asUintN(64, (n << 1n) ^ (n >> 63n)));
      };
  }
}

/** A field's tag: its number and wire type, as a varint. */
function tagSize(fieldNo: number): number {
  return varintSize((fieldNo << 3) >>> 0);
}

function varintSize(n: number): number {
  if (n < 0x80) return 1;
  if (n < 0x4000) return 2;
  if (n < 0x200000) return 3;
  if (n < 0x10000000) return 4;
  return 5;
}

function varint64Size(n: bigint): number {
  if (n < 0x80n) return 1;
  let bytes = 1;
  while (n >= 0x80n) {
    n >>= 7n;
    bytes++;
  }
  return bytes;
}
