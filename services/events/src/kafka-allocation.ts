// kafkajs builds every record, and every header of every record, in a fresh
// zero-filled 512-byte Buffer.alloc (eight per CloudEvent), then copies them
// into the request: a new ArrayBuffer and backing store each, most of a
// producer thread's allocation and a fifth of its time. This makes small
// zero-filled buffers come from Node's shared pool instead; they are
// zero-filled all the same. It changes Buffer.alloc for the whole thread, so
// call it only where kafkajs is what the thread runs (the relay's producer
// thread, a benchmark's direct producer).
export function poolSmallZeroFilledBuffers(): void {
  if ((Buffer.alloc as { pooled?: true }).pooled) return;
  const alloc = Buffer.alloc;
  const pooled = ((size: number, fill?: string | Uint8Array | number, encoding?: BufferEncoding) =>
    fill === undefined && size < Buffer.poolSize >>> 1
      ? Buffer.allocUnsafe(size).fill(0)
      : alloc(size, fill, encoding)) as typeof Buffer.alloc & { pooled?: true };
  pooled.pooled = true;
  Buffer.alloc = pooled;
}
