"""Verifiable logs: RFC 9162 Merkle hashing and proofs, and checkpoints as C2SP signed notes.

Everything here is pure (no database, no network), so an auditor checks a log offline with
nothing but what the log handed out and the log's verifier key (docs/audit-log.md, "Hashing,
proofs and checkpoints", gives every format byte for byte):

- hashing: ``leaf_hash`` (SHA-256 of 0x00 || data), ``node_hash`` (0x01 || left || right),
  ``tree_hash`` (MTH of leaf hashes), ``EMPTY_ROOT``;
- inclusion: ``verify_inclusion(index, size, leaf_hash, proof, root)``; a log builds the proof with
  ``inclusion_proof(index, size, subtree_hash)``;
- consistency: ``verify_consistency(size1, size2, proof, root1, root2)``; a log builds it with
  ``consistency_proof(size1, size2, subtree_hash)``;
- a log's state without every leaf: ``CompactRange`` (append a leaf hash, get the perfect subtrees
  it completes to store, and the root), and ``subtree_hashes_of_nodes(read_node)`` for the proof
  hashes from those stored nodes (``subtree_hashes_of_leaves`` when every leaf hash is at hand);
- checkpoints: ``Checkpoint``, ``sign_checkpoint`` (the log's side, with a ``NoteSigner``) and
  ``open_checkpoint(message, [NoteVerifier.from_vkey(vkey)], origin=...)`` (the auditor's side);
- the audit log's entries: ``encode_leaf``/``decode_leaf`` for the seven kinds of ``Leaf``, and
  ``check_proposal`` (a proposal leaf's content yields the operation id it names);
- a run of leaves read in index order: ``History`` (each decodes, a decision follows its proposal
  and is the operation's only one, an effect follows an approval), ``HistoryError`` naming the
  first leaf that does not fit;
- signed notes in general: ``sign_note``, ``open_note``, ``parse_note``.

A failure raises a ``TransparencyError`` whose subclass names what does not hold; the tree is in
``decisionflow.transparency._errors``.

Checking that an entry is in the log a checkpoint vouches for::

    from decisionflow.transparency import NoteVerifier, leaf_hash, open_checkpoint, verify_inclusion

    log_key = NoteVerifier.from_vkey(log_vkey)  # the log's verifier key string, kept by the auditor
    checkpoint = open_checkpoint(signed_checkpoint, [log_key], origin=log_origin)
    verify_inclusion(index, checkpoint.size, leaf_hash(entry), proof, checkpoint.root_hash)
"""

from decisionflow.transparency._checkpoint import (
    MAX_TREE_SIZE,
    Checkpoint,
    open_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
)
from decisionflow.transparency._consistency import (
    consistency_proof,
    consistency_proof_length,
    consistency_ranges,
    verify_consistency,
)
from decisionflow.transparency._decoding import check_proposal, decode_leaf
from decisionflow.transparency._errors import (
    BadSignature,
    InvalidTreeRange,
    MalformedCheckpoint,
    MalformedHash,
    MalformedKey,
    MalformedNote,
    NoteError,
    ProofError,
    TransparencyError,
    UnknownKey,
    WrongOrigin,
    WrongProofLength,
    WrongRoot,
)
from decisionflow.transparency._hashing import EMPTY_ROOT, HASH_SIZE, leaf_hash, node_hash, tree_hash
from decisionflow.transparency._history import History, HistoryError, LoggedOperation, NotProven
from decisionflow.transparency._inclusion import (
    inclusion_proof,
    inclusion_proof_length,
    inclusion_ranges,
    root_from_inclusion_proof,
    verify_inclusion,
)
from decisionflow.transparency._keys import ED25519, NoteSigner, NoteVerifier, key_id
from decisionflow.transparency._leaves import (
    LEAF_DOMAIN,
    DecisionLeaf,
    EffectLeaf,
    EscalationLeaf,
    ExpiryLeaf,
    Leaf,
    MalformedLeaf,
    ProposalLeaf,
    RejectionLeaf,
    RerouteLeaf,
    SettlementLeaf,
    VoteLeaf,
    encode_leaf,
    format_time,
)
from decisionflow.transparency._note import (
    MAX_SIGNATURES,
    NoteSignature,
    OpenedNote,
    SignedNote,
    open_note,
    parse_note,
    sign_note,
)
from decisionflow.transparency._subtrees import (
    CompactRange,
    NodeReader,
    StoredNode,
    SubtreeHash,
    perfect_subtrees,
    range_hash,
    subtree_hashes_of_leaves,
    subtree_hashes_of_nodes,
)

__all__ = [
    "ED25519",
    "EMPTY_ROOT",
    "HASH_SIZE",
    "LEAF_DOMAIN",
    "MAX_SIGNATURES",
    "MAX_TREE_SIZE",
    "BadSignature",
    "Checkpoint",
    "CompactRange",
    "DecisionLeaf",
    "EffectLeaf",
    "EscalationLeaf",
    "ExpiryLeaf",
    "History",
    "HistoryError",
    "InvalidTreeRange",
    "Leaf",
    "LoggedOperation",
    "MalformedCheckpoint",
    "MalformedHash",
    "MalformedKey",
    "MalformedLeaf",
    "MalformedNote",
    "NodeReader",
    "NotProven",
    "NoteError",
    "NoteSignature",
    "NoteSigner",
    "NoteVerifier",
    "OpenedNote",
    "ProofError",
    "ProposalLeaf",
    "RejectionLeaf",
    "RerouteLeaf",
    "SettlementLeaf",
    "SignedNote",
    "StoredNode",
    "SubtreeHash",
    "TransparencyError",
    "UnknownKey",
    "VoteLeaf",
    "WrongOrigin",
    "WrongProofLength",
    "WrongRoot",
    "check_proposal",
    "consistency_proof",
    "consistency_proof_length",
    "consistency_ranges",
    "decode_leaf",
    "encode_leaf",
    "format_time",
    "inclusion_proof",
    "inclusion_proof_length",
    "inclusion_ranges",
    "key_id",
    "leaf_hash",
    "node_hash",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint",
    "parse_note",
    "perfect_subtrees",
    "range_hash",
    "root_from_inclusion_proof",
    "sign_checkpoint",
    "sign_note",
    "subtree_hashes_of_leaves",
    "subtree_hashes_of_nodes",
    "tree_hash",
    "verify_consistency",
    "verify_inclusion",
]
