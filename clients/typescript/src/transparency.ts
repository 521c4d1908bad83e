// RFC 6962 / RFC 9162 hashing and inclusion proofs, checked offline: the leaf hash of an entry and
// whether a proof puts it at its index in the tree of a given size and root. The same algorithms
// and errors as the Python client's decisionflow.transparency (docs/audit-log.md gives the formats):
//
//   leaf hash = SHA-256(0x00 || data)      node hash = SHA-256(0x01 || left || right)
//
// Indices and sizes are bigints (or safe integers): a log may outgrow 2^53 entries.

import { createHash } from "node:crypto";

/** Bytes in a SHA-256 digest: every leaf hash, node hash and root. */
export const HASH_SIZE = 32;

/** A Merkle proof does not hold; the subclass says what. */
export class ProofError extends Error {
  override name = "ProofError";
}

/** The leaf index or tree size names no proof (an index beyond the tree). */
export class InvalidTreeRange extends ProofError {
  override name = "InvalidTreeRange";
}

/** The proof has another number of hashes than its index and size call for. */
export class WrongProofLength extends ProofError {
  override name = "WrongProofLength";
  constructor(
    readonly expected: number,
    readonly actual: number,
  ) {
    super(`the proof has ${actual} hashes, ${expected} expected`);
  }
}

/** A leaf hash or proof hash is not a SHA-256 digest (32 bytes). */
export class MalformedHash extends ProofError {
  override name = "MalformedHash";
  constructor(
    readonly what: string,
    readonly length: number,
  ) {
    super(`${what} is ${length} bytes, not 32`);
  }
}

/** The proof leads to another root than the one expected for that tree size. */
export class WrongRoot extends ProofError {
  override name = "WrongRoot";
  constructor(
    readonly treeSize: bigint,
    readonly expected: Uint8Array,
    readonly computed: Uint8Array,
  ) {
    super(`the proof leads to root ${hex(computed)} of the tree of size ${treeSize}, not ${hex(expected)}`);
  }
}

/** The hash of a leaf: SHA-256(0x00 || data). */
export function leafHash(data: Uint8Array): Uint8Array {
  return sha256(Uint8Array.of(0x00), data);
}

/** The hash of an inner node: SHA-256(0x01 || left || right). */
export function nodeHash(left: Uint8Array, right: Uint8Array): Uint8Array {
  return sha256(Uint8Array.of(0x01), left, right);
}

/** How many hashes the inclusion proof of the leaf at index in a tree of size leaves has. */
export function inclusionProofLength(index: bigint | number, size: bigint | number): number {
  const [leaf, treeSize] = checkedRange(index, size);
  // Below the level where the paths to index and to the last leaf part, every level gives one
  // sibling; above it, only the levels where index's ancestor is a right child do.
  const inner = bitLength(leaf ^ (treeSize - 1n));
  return inner + popCount(leaf >> BigInt(inner));
}

/** The root the proof leads to from the leaf hash at index in a tree of size leaves (RFC 9162 §2.1.3.2). */
export function rootFromInclusionProof(
  index: bigint | number,
  size: bigint | number,
  leaf: Uint8Array,
  proof: readonly Uint8Array[],
): Uint8Array {
  const expected = inclusionProofLength(index, size);
  if (proof.length !== expected) throw new WrongProofLength(expected, proof.length);
  if (leaf.length !== HASH_SIZE) throw new MalformedHash("the leaf hash", leaf.length);
  proof.forEach((sibling, position) => {
    if (sibling.length !== HASH_SIZE) throw new MalformedHash(`proof hash ${position}`, sibling.length);
  });
  let [fn, sn] = checkedRange(index, size);
  sn -= 1n;
  let computed = leaf;
  for (const sibling of proof) {
    if (sn === 0n) throw new ProofError(`the proof does not fit a tree of ${size} leaves`);
    if ((fn & 1n) === 1n || fn === sn) {
      computed = nodeHash(sibling, computed);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      computed = nodeHash(computed, sibling);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) throw new ProofError(`the proof does not fit a tree of ${size} leaves`);
  return computed;
}

/** Return if the leaf hash is at index in the tree of size leaves whose root is root; throw a ProofError otherwise. */
export function verifyInclusion(
  index: bigint | number,
  size: bigint | number,
  leaf: Uint8Array,
  proof: readonly Uint8Array[],
  root: Uint8Array,
): void {
  const computed = rootFromInclusionProof(index, size, leaf, proof);
  if (!equal(computed, root)) throw new WrongRoot(BigInt(size), root, computed);
}

function checkedRange(index: bigint | number, size: bigint | number): [bigint, bigint] {
  for (const value of [index, size]) {
    if (typeof value === "number" && !Number.isSafeInteger(value)) {
      throw new InvalidTreeRange(`${value} is not an exact integer (pass a bigint)`);
    }
  }
  const [leaf, treeSize] = [BigInt(index), BigInt(size)];
  if (leaf < 0n || leaf >= treeSize) throw new InvalidTreeRange(`no leaf ${leaf} in a tree of ${treeSize} leaves`);
  return [leaf, treeSize];
}

function bitLength(value: bigint): number {
  return value === 0n ? 0 : value.toString(2).length;
}

function popCount(value: bigint): number {
  let count = 0;
  for (const digit of value.toString(2)) if (digit === "1") count++;
  return count;
}

function sha256(...parts: Uint8Array[]): Uint8Array {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(part);
  return new Uint8Array(hash.digest());
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString("hex");
}
