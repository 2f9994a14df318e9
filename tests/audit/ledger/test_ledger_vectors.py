"""Conformance with the transparency-dev/merkle reference verifier and with pymerkle.

1. Every inclusion and consistency probe of transparency-dev/merkle ``testdata/`` (commit
   417fb0c314750d94e53942e9f92e79b6d35915db, Apache-2.0; the probes are data: tree size, index, hashes, proof
   and the reference verifier's verdict ``wantErr``) must get the same verdict from our verifier. One
   documented deviation: we reject hashes that are not 32 bytes even where the reference does not look
   at them (equal sizes).
2. pymerkle 7 (GPLv3+, imported only here as an independent oracle; its indices count from 1) built with
   its defaults -- algorithm "sha256", security on, i.e. leaf prefix 0x00 and node prefix 0x01 -- is RFC 6962
   hashing: roots at every size and inclusion paths must equal ours.
"""

from __future__ import annotations

import base64
import random

import pytest

from dprag.audit.protocol.ledger.errors import MalformedProofError, ProofError
from dprag.audit.protocol.ledger.proof import verify_consistency, verify_inclusion
from dprag.audit.protocol.ledger.rfc6962 import hash_leaf
from dprag.audit.protocol.ledger.store import MemoryLog, SqliteLog

# Hash table: probes below refer to hashes by position (base64 strings exactly as in the JSON files).
_H = [
    "bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=",
    "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
    "",
    "q6yroAAAAAAAAAAAAAAAAAAAAAAAAAAAAGAGHgASNFY=",
    "V3JvbmdMZWFm",
    "lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
    "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
    "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
    "XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",
    "nqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
    "Vwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
    "Y0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
    "QnGia+DYqE8L1UyMMC58s6O10fpngKQLzOKHNHfatlg=",
    "vBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
    "yoVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
    "037kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
    "tBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
    "woVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
    "237kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
    "ApjRIpBtz8EIkstTpzmS/FufST6kybrbJ7eRtBJ6f+c=",
    "+sVCA+fMaWzw38tCySodnbr3CtnmIfS9jZhmLwDjwSU=",
    "rra8/idLcKFPsGel5VeCZNsPqbUa9eC6FZFY8yngbnc=",
    "8sVCA+fMaWzw38tCySodnbr3CtnmIfS9jZhmLwDjwSU=",
    "Tju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=",
    "ZjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=",
    "DTrtAjFI/9KiWfvQzcf7PPl1ZYdg03dbgq9vkKrMLfw=",
    "hqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
    "Twg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
    "e0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=",
    "V3JvbmdSb290",
    "duZ9rbzfHhDht03cYIq9L5jfsW+851J3tSMqEn8gh+8=",
    "DrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=",
    "HrxdNDf74tsVi58Sah0RjjCBgQMdCpSfje3t68VY72o=",
    "2oVOoSjtBQtBs1/8G4e46yveRh6eO1WW7Oa51ZdaCuA=",
    "w37kGJdt2VdTwcc4Yrk5j6Kiz5tP8P3+izDNlSCWFLc=",
    "rBoGQ7EuTS18d5GPROD095qDi2z57FtcKD4fTYhZnms=",
    "3bib5AOAnjJXUNPSY814kpwpQreUKjS3fhIslZSnTIw=",
    "sIaT7C5yFZcTBkHoIR5+7cy0wmQTlj7ubB4u0W/7Gl8=",
    "oIaT7C5yFZcTBkHoIR5+7cy0wmQTlj7ubB4u0W/7Gl8=",
    "ZG9uJ3QgY2FyZSAy",
    "ZG9uJ3QgY2FyZSAx",
]

# (leaf_index, tree_size, leaf_hash, proof, root, want_error, source file under testdata/)
INCLUSION_PROBES = [
    (0, 1, 0, [], 1, True, "inclusion/0/empty-root.json"),
    (0, 1, 0, [], 0, False, "inclusion/0/happy-path.json"),
    (2, 1, 0, [], 0, True, "inclusion/0/leafIdx-XOR-@2.json"),
    (1, 1, 0, [], 0, True, "inclusion/0/leafIdx-plus-@1.json"),
    (18446744073709551615, 1, 0, [], 0, True, "inclusion/0/leafIdx-sub-@1.json"),
    (0, 1, 0, [2], 0, True, "inclusion/0/preceding-garbage.json"),
    (0, 1, 0, [0], 0, True, "inclusion/0/preceding-root.json"),
    (0, 1, 0, [], 3, True, "inclusion/0/random-root.json"),
    (0, 1, 0, [2], 0, True, "inclusion/0/trailing-garbage.json"),
    (0, 1, 0, [0], 0, True, "inclusion/0/trailing-root.json"),
    (0, 0, 0, [], 0, True, "inclusion/0/treeSize-div-@2.json"),
    (0, 2, 0, [], 0, True, "inclusion/0/treeSize-mul-@2.json"),
    (0, 1, 4, [], 0, True, "inclusion/0/wrong-leaf.json"),
    (0, 8, 0, [5, 6, 7], 1, True, "inclusion/1/empty-root.json"),
    (0, 8, 0, [5, 6, 7], 8, False, "inclusion/1/happy-path.json"),
    (0, 8, 0, [5, 3, 6, 7], 8, True, "inclusion/1/inserted-component.json"),
    (2, 8, 0, [5, 6, 7], 8, True, "inclusion/1/leafIdx-XOR-@2.json"),
    (1, 8, 0, [5, 6, 7], 8, True, "inclusion/1/leafIdx-plus-@1.json"),
    (18446744073709551615, 8, 0, [5, 6, 7], 8, True, "inclusion/1/leafIdx-sub-@1.json"),
    (0, 8, 0, [9, 6, 7], 8, True, "inclusion/1/modified-proof[0]-bit-@3.json"),
    (0, 8, 0, [5, 10, 7], 8, True, "inclusion/1/modified-proof[1]-bit-@3.json"),
    (0, 8, 0, [5, 6, 11], 8, True, "inclusion/1/modified-proof[2]-bit-@3.json"),
    (0, 8, 0, [2, 5, 6, 7], 8, True, "inclusion/1/preceding-garbage.json"),
    (0, 8, 0, [8, 5, 6, 7], 8, True, "inclusion/1/preceding-root.json"),
    (0, 8, 0, [5, 6, 7], 3, True, "inclusion/1/random-root.json"),
    (0, 8, 0, [5, 6], 8, True, "inclusion/1/removed-component.json"),
    (0, 8, 0, [5, 6, 7, 2], 8, True, "inclusion/1/trailing-garbage.json"),
    (0, 8, 0, [5, 6, 7, 8], 8, True, "inclusion/1/trailing-root.json"),
    (0, 4, 0, [5, 6, 7], 8, True, "inclusion/1/treeSize-div-@2.json"),
    (0, 16, 0, [5, 6, 7], 8, True, "inclusion/1/treeSize-mul-@2.json"),
    (0, 8, 4, [5, 6, 7], 8, True, "inclusion/1/wrong-leaf.json"),
    (5, 8, 12, [13, 14, 15], 1, True, "inclusion/2/empty-root.json"),
    (5, 8, 12, [13, 14, 15], 8, False, "inclusion/2/happy-path.json"),
    (5, 8, 12, [13, 3, 14, 15], 8, True, "inclusion/2/inserted-component.json"),
    (7, 8, 12, [13, 14, 15], 8, True, "inclusion/2/leafIdx-XOR-@2.json"),
    (6, 8, 12, [13, 14, 15], 8, True, "inclusion/2/leafIdx-plus-@1.json"),
    (4, 8, 12, [13, 14, 15], 8, True, "inclusion/2/leafIdx-sub-@1.json"),
    (5, 8, 12, [16, 14, 15], 8, True, "inclusion/2/modified-proof[0]-bit-@3.json"),
    (5, 8, 12, [13, 17, 15], 8, True, "inclusion/2/modified-proof[1]-bit-@3.json"),
    (5, 8, 12, [13, 14, 18], 8, True, "inclusion/2/modified-proof[2]-bit-@3.json"),
    (5, 8, 12, [2, 13, 14, 15], 8, True, "inclusion/2/preceding-garbage.json"),
    (5, 8, 12, [8, 13, 14, 15], 8, True, "inclusion/2/preceding-root.json"),
    (5, 8, 12, [13, 14, 15], 3, True, "inclusion/2/random-root.json"),
    (5, 8, 12, [13, 14], 8, True, "inclusion/2/removed-component.json"),
    (5, 8, 12, [13, 14, 15, 2], 8, True, "inclusion/2/trailing-garbage.json"),
    (5, 8, 12, [13, 14, 15, 8], 8, True, "inclusion/2/trailing-root.json"),
    (5, 4, 12, [13, 14, 15], 8, True, "inclusion/2/treeSize-div-@2.json"),
    (5, 16, 12, [13, 14, 15], 8, True, "inclusion/2/treeSize-mul-@2.json"),
    (5, 8, 4, [13, 14, 15], 8, True, "inclusion/2/wrong-leaf.json"),
    (2, 3, 19, [20], 1, True, "inclusion/3/empty-root.json"),
    (2, 3, 19, [20], 21, False, "inclusion/3/happy-path.json"),
    (0, 3, 19, [20], 21, True, "inclusion/3/leafIdx-XOR-@2.json"),
    (3, 3, 19, [20], 21, True, "inclusion/3/leafIdx-plus-@1.json"),
    (1, 3, 19, [20], 21, True, "inclusion/3/leafIdx-sub-@1.json"),
    (2, 3, 19, [22], 21, True, "inclusion/3/modified-proof[0]-bit-@3.json"),
    (2, 3, 19, [2, 20], 21, True, "inclusion/3/preceding-garbage.json"),
    (2, 3, 19, [21, 20], 21, True, "inclusion/3/preceding-root.json"),
    (2, 3, 19, [20], 3, True, "inclusion/3/random-root.json"),
    (2, 3, 19, [], 21, True, "inclusion/3/removed-component.json"),
    (2, 3, 19, [20, 2], 21, True, "inclusion/3/trailing-garbage.json"),
    (2, 3, 19, [20, 21], 21, True, "inclusion/3/trailing-root.json"),
    (2, 1, 19, [20], 21, True, "inclusion/3/treeSize-div-@2.json"),
    (2, 6, 19, [20], 21, True, "inclusion/3/treeSize-mul-@2.json"),
    (2, 3, 4, [20], 21, True, "inclusion/3/wrong-leaf.json"),
    (1, 5, 5, [0, 6, 13], 1, True, "inclusion/4/empty-root.json"),
    (1, 5, 5, [0, 6, 13], 23, False, "inclusion/4/happy-path.json"),
    (1, 5, 5, [0, 3, 6, 13], 23, True, "inclusion/4/inserted-component.json"),
    (3, 5, 5, [0, 6, 13], 23, True, "inclusion/4/leafIdx-XOR-@2.json"),
    (2, 5, 5, [0, 6, 13], 23, True, "inclusion/4/leafIdx-plus-@1.json"),
    (0, 5, 5, [0, 6, 13], 23, True, "inclusion/4/leafIdx-sub-@1.json"),
    (1, 5, 5, [24, 6, 13], 23, True, "inclusion/4/modified-proof[0]-bit-@3.json"),
    (1, 5, 5, [0, 10, 13], 23, True, "inclusion/4/modified-proof[1]-bit-@3.json"),
    (1, 5, 5, [0, 6, 16], 23, True, "inclusion/4/modified-proof[2]-bit-@3.json"),
    (1, 5, 5, [2, 0, 6, 13], 23, True, "inclusion/4/preceding-garbage.json"),
    (1, 5, 5, [23, 0, 6, 13], 23, True, "inclusion/4/preceding-root.json"),
    (1, 5, 5, [0, 6, 13], 3, True, "inclusion/4/random-root.json"),
    (1, 5, 5, [0, 6], 23, True, "inclusion/4/removed-component.json"),
    (1, 5, 5, [0, 6, 13, 2], 23, True, "inclusion/4/trailing-garbage.json"),
    (1, 5, 5, [0, 6, 13, 23], 23, True, "inclusion/4/trailing-root.json"),
    (1, 2, 5, [0, 6, 13], 23, True, "inclusion/4/treeSize-div-@2.json"),
    (1, 10, 5, [0, 6, 13], 23, True, "inclusion/4/treeSize-mul-@2.json"),
    (1, 5, 4, [0, 6, 13], 23, True, "inclusion/4/wrong-leaf.json"),
    (0, 0, 3, [], 1, True, "inclusion/additional/0/empty-root-and-random-leaf.json"),
    (0, 0, 2, [], 1, True, "inclusion/additional/0/empty-root.json"),
    (0, 0, 3, [], 2, True, "inclusion/additional/0/random-leaf.json"),
    (0, 1, 3, [], 1, True, "inclusion/additional/1/empty-root-and-random-leaf.json"),
    (0, 1, 2, [], 1, True, "inclusion/additional/1/empty-root.json"),
    (0, 1, 3, [], 2, True, "inclusion/additional/1/random-leaf.json"),
    (1, 0, 3, [], 1, True, "inclusion/additional/2/empty-root-and-random-leaf.json"),
    (1, 0, 2, [], 1, True, "inclusion/additional/2/empty-root.json"),
    (1, 0, 3, [], 2, True, "inclusion/additional/2/random-leaf.json"),
    (2, 1, 3, [], 1, True, "inclusion/additional/3/empty-root-and-random-leaf.json"),
    (2, 1, 2, [], 1, True, "inclusion/additional/3/empty-root.json"),
    (2, 1, 3, [], 2, True, "inclusion/additional/3/random-leaf.json"),
    (0, 1, 2, [], 25, True, "inclusion/single-entry/empty-leaf.json"),
    (0, 1, 2, [], 2, True, "inclusion/single-entry/empty-root-and-leaf.json"),
    (0, 1, 25, [], 2, True, "inclusion/single-entry/empty-root.json"),
    (0, 1, 25, [], 25, False, "inclusion/single-entry/matching-root-and-leaf.json"),
]

# (size1, size2, root1, root2, proof, want_error, source file under testdata/)
CONSISTENCY_PROBES = [
    (1, 1, 0, 0, [], False, "consistency/0/happy-path.json"),
    (1, 8, 0, 8, [], True, "consistency/1/empty-proof.json"),
    (1, 8, 0, 8, [5, 6, 7], False, "consistency/1/happy-path.json"),
    (1, 8, 0, 8, [26, 6, 7], True, "consistency/1/modified-proof@0-bit-@4.json"),
    (1, 8, 0, 8, [5, 27, 7], True, "consistency/1/modified-proof@1-bit-@4.json"),
    (1, 8, 0, 8, [5, 6, 28], True, "consistency/1/modified-proof@2-bit-@4.json"),
    (1, 8, 0, 8, [2, 5, 6, 7], True, "consistency/1/preceding-garbage.json"),
    (1, 8, 0, 8, [5, 5, 6, 7], True, "consistency/1/preceding-proof-@0.json"),
    (1, 8, 0, 8, [0, 5, 6, 7], True, "consistency/1/preceding-root1.json"),
    (1, 8, 0, 8, [8, 5, 6, 7], True, "consistency/1/preceding-root2.json"),
    (3, 8, 0, 8, [5, 6, 7], True, "consistency/1/size1-XOR-@2.json"),
    (2, 8, 0, 8, [5, 6, 7], True, "consistency/1/size1-plus-@1.json"),
    (0, 8, 0, 8, [5, 6, 7], True, "consistency/1/size1-sub-@1.json"),
    (1, 4, 0, 8, [5, 6, 7], True, "consistency/1/size2-div-@2.json"),
    (1, 16, 0, 8, [5, 6, 7], True, "consistency/1/size2-mul-@2.json"),
    (1, 8, 8, 0, [5, 6, 7], True, "consistency/1/swapped-roots.json"),
    (1, 8, 0, 8, [5, 6, 7, 2], True, "consistency/1/trailing-garbage.json"),
    (1, 8, 0, 8, [5, 6, 7, 0], True, "consistency/1/trailing-root1.json"),
    (1, 8, 0, 8, [5, 6, 7, 8], True, "consistency/1/trailing-root2.json"),
    (1, 8, 0, 8, [5, 6], True, "consistency/1/truncated-proof.json"),
    (1, 8, 29, 8, [5, 6, 7], True, "consistency/1/wrong-root1.json"),
    (1, 8, 0, 29, [5, 6, 7], True, "consistency/1/wrong-root2.json"),
    (6, 8, 30, 8, [], True, "consistency/2/empty-proof.json"),
    (6, 8, 30, 8, [31, 14, 15], False, "consistency/2/happy-path.json"),
    (6, 8, 30, 8, [32, 14, 15], True, "consistency/2/modified-proof@0-bit-@4.json"),
    (6, 8, 30, 8, [31, 33, 15], True, "consistency/2/modified-proof@1-bit-@4.json"),
    (6, 8, 30, 8, [31, 14, 34], True, "consistency/2/modified-proof@2-bit-@4.json"),
    (6, 8, 30, 8, [2, 31, 14, 15], True, "consistency/2/preceding-garbage.json"),
    (6, 8, 30, 8, [31, 31, 14, 15], True, "consistency/2/preceding-proof-@0.json"),
    (6, 8, 30, 8, [30, 31, 14, 15], True, "consistency/2/preceding-root1.json"),
    (6, 8, 30, 8, [8, 31, 14, 15], True, "consistency/2/preceding-root2.json"),
    (4, 8, 30, 8, [31, 14, 15], True, "consistency/2/size1-XOR-@2.json"),
    (7, 8, 30, 8, [31, 14, 15], True, "consistency/2/size1-plus-@1.json"),
    (5, 8, 30, 8, [31, 14, 15], True, "consistency/2/size1-sub-@1.json"),
    (6, 4, 30, 8, [31, 14, 15], True, "consistency/2/size2-div-@2.json"),
    (6, 16, 30, 8, [31, 14, 15], True, "consistency/2/size2-mul-@2.json"),
    (6, 8, 8, 30, [31, 14, 15], True, "consistency/2/swapped-roots.json"),
    (6, 8, 30, 8, [31, 14, 15, 2], True, "consistency/2/trailing-garbage.json"),
    (6, 8, 30, 8, [31, 14, 15, 30], True, "consistency/2/trailing-root1.json"),
    (6, 8, 30, 8, [31, 14, 15, 8], True, "consistency/2/trailing-root2.json"),
    (6, 8, 30, 8, [31, 14], True, "consistency/2/truncated-proof.json"),
    (6, 8, 29, 8, [31, 14, 15], True, "consistency/2/wrong-root1.json"),
    (6, 8, 30, 29, [31, 14, 15], True, "consistency/2/wrong-root2.json"),
    (2, 5, 20, 23, [], True, "consistency/3/empty-proof.json"),
    (2, 5, 20, 23, [6, 13], False, "consistency/3/happy-path.json"),
    (2, 5, 20, 23, [27, 13], True, "consistency/3/modified-proof@0-bit-@4.json"),
    (2, 5, 20, 23, [6, 35], True, "consistency/3/modified-proof@1-bit-@4.json"),
    (2, 5, 20, 23, [2, 6, 13], True, "consistency/3/preceding-garbage.json"),
    (2, 5, 20, 23, [6, 6, 13], True, "consistency/3/preceding-proof-@0.json"),
    (2, 5, 20, 23, [20, 6, 13], True, "consistency/3/preceding-root1.json"),
    (2, 5, 20, 23, [23, 6, 13], True, "consistency/3/preceding-root2.json"),
    (0, 5, 20, 23, [6, 13], True, "consistency/3/size1-XOR-@2.json"),
    (3, 5, 20, 23, [6, 13], True, "consistency/3/size1-plus-@1.json"),
    (1, 5, 20, 23, [6, 13], True, "consistency/3/size1-sub-@1.json"),
    (2, 2, 20, 23, [6, 13], True, "consistency/3/size2-div-@2.json"),
    (2, 10, 20, 23, [6, 13], True, "consistency/3/size2-mul-@2.json"),
    (2, 5, 23, 20, [6, 13], True, "consistency/3/swapped-roots.json"),
    (2, 5, 20, 23, [6, 13, 2], True, "consistency/3/trailing-garbage.json"),
    (2, 5, 20, 23, [6, 13, 20], True, "consistency/3/trailing-root1.json"),
    (2, 5, 20, 23, [6, 13, 23], True, "consistency/3/trailing-root2.json"),
    (2, 5, 20, 23, [6], True, "consistency/3/truncated-proof.json"),
    (2, 5, 29, 23, [6, 13], True, "consistency/3/wrong-root1.json"),
    (2, 5, 20, 29, [6, 13], True, "consistency/3/wrong-root2.json"),
    (6, 7, 30, 36, [], True, "consistency/4/empty-proof.json"),
    (6, 7, 30, 36, [31, 37, 15], False, "consistency/4/happy-path.json"),
    (6, 7, 30, 36, [32, 37, 15], True, "consistency/4/modified-proof@0-bit-@4.json"),
    (6, 7, 30, 36, [31, 38, 15], True, "consistency/4/modified-proof@1-bit-@4.json"),
    (6, 7, 30, 36, [31, 37, 34], True, "consistency/4/modified-proof@2-bit-@4.json"),
    (6, 7, 30, 36, [2, 31, 37, 15], True, "consistency/4/preceding-garbage.json"),
    (6, 7, 30, 36, [31, 31, 37, 15], True, "consistency/4/preceding-proof-@0.json"),
    (6, 7, 30, 36, [30, 31, 37, 15], True, "consistency/4/preceding-root1.json"),
    (6, 7, 30, 36, [36, 31, 37, 15], True, "consistency/4/preceding-root2.json"),
    (4, 7, 30, 36, [31, 37, 15], True, "consistency/4/size1-XOR-@2.json"),
    (7, 7, 30, 36, [31, 37, 15], True, "consistency/4/size1-plus-@1.json"),
    (5, 7, 30, 36, [31, 37, 15], True, "consistency/4/size1-sub-@1.json"),
    (6, 3, 30, 36, [31, 37, 15], True, "consistency/4/size2-div-@2.json"),
    (6, 14, 30, 36, [31, 37, 15], True, "consistency/4/size2-mul-@2.json"),
    (6, 7, 36, 30, [31, 37, 15], True, "consistency/4/swapped-roots.json"),
    (6, 7, 30, 36, [31, 37, 15, 2], True, "consistency/4/trailing-garbage.json"),
    (6, 7, 30, 36, [31, 37, 15, 30], True, "consistency/4/trailing-root1.json"),
    (6, 7, 30, 36, [31, 37, 15, 36], True, "consistency/4/trailing-root2.json"),
    (6, 7, 30, 36, [31, 37], True, "consistency/4/truncated-proof.json"),
    (6, 7, 29, 36, [31, 37, 15], True, "consistency/4/wrong-root1.json"),
    (6, 7, 30, 29, [31, 37, 15], True, "consistency/4/wrong-root2.json"),
    (0, 1, 1, 1, [1], True, "consistency/additional/consistency-check-on-empty-tree-size1-is-zero-is-useless.json"),
    (0, 0, 1, 39, [], True, "consistency/additional/roots-do-not-match-and-sizes-are-zero.json"),
    (1, 1, 1, 39, [], True, "consistency/additional/roots-do-not-not-match-and-sizes-are-one.json"),
    (2, 1, 40, 39, [], True, "consistency/additional/size1-is-greater-than-size2-again.json"),
    (1, 0, 40, 39, [], True, "consistency/additional/size1-is-greater-than-size2.json"),
    (0, 1, 40, 39, [], True, "consistency/additional/size1-is-zero-and-does-not-equal-size2.json"),
    (0, 1, 1, 39, [], True, "consistency/additional/size1-is-zero-and-size2-is-not-zero.json"),
    (1, 1, 39, 39, [], False, "consistency/additional/sizes-are-equal-one-and-proof-is-empty.json"),
    (1, 1, 40, 39, [], True, "consistency/additional/sizes-are-equal-one-but-roots-are-not.json"),
    (0, 0, 40, 40, [], True, "consistency/additional/sizes-are-equal-zero-and-proof-is-empty.json"),
    (0, 0, 40, 39, [], True, "consistency/additional/sizes-are-equal-zero-but-roots-are-not.json"),
    (1, 2, 40, 39, [], True, "consistency/additional/sizes-do-not-watch-and-proof-is-empty.json"),
    (1, 1, 1, 1, [1], True, "consistency/additional/sizes-match-but-proof-is-not-empty-and-sizes-are-one.json"),
    (0, 0, 1, 1, [1], True, "consistency/additional/sizes-match-but-proof-is-not-empty-and-sizes-are-zero.json"),
]


def _b(i: int) -> bytes:
    return base64.b64decode(_H[i])


# Probes where the reference accepts a non-32-byte "root" because with size1 == size2 it only compares
# the two roots byte for byte; we reject such input as malformed (MalformedProofError naming root1).
DELIBERATE_DEVIATIONS = {"consistency/additional/sizes-are-equal-one-and-proof-is-empty.json"}


@pytest.mark.parametrize("probe", INCLUSION_PROBES, ids=[p[-1] for p in INCLUSION_PROBES])
def test_transparency_dev_inclusion_probes(probe):
    index, size, leaf, proof, root, want_err, _ = probe
    args = (index, size, _b(leaf), [_b(h) for h in proof], _b(root))
    if want_err:
        with pytest.raises(ProofError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize("probe", CONSISTENCY_PROBES, ids=[p[-1] for p in CONSISTENCY_PROBES])
def test_transparency_dev_consistency_probes(probe):
    size1, size2, root1, root2, proof, want_err, name = probe
    args = (size1, size2, [_b(h) for h in proof], _b(root1), _b(root2))
    if name in DELIBERATE_DEVIATIONS:
        assert not want_err and len(_b(root1)) != 32
        with pytest.raises(MalformedProofError) as e:
            verify_consistency(*args)
        assert e.value.field == "root1"
    elif want_err:
        with pytest.raises(ProofError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def test_pymerkle_roots_and_inclusion_paths_agree(tmp_path):
    import pymerkle

    rng = random.Random(77)
    leaves = [rng.randbytes(rng.randrange(1, 50)) for _ in range(200)]
    ref = pymerkle.InmemoryTree(algorithm="sha256")  # defaults: security on = RFC 6962 prefixes
    for x in leaves:
        ref.append_entry(x)
    ours = MemoryLog(leaves)
    disk = SqliteLog(tmp_path / "l.db")
    disk.append_many(leaves)
    for n in range(1, 201):
        want = ref.get_root(n)
        assert ours.root(n) == want == disk.root(n)
    for n in list(range(1, 70)) + [127, 128, 129, 200]:
        for i in range(n):
            p = ref.prove_inclusion(i + 1, n)  # pymerkle: 1-based index
            assert p.path[0] == hash_leaf(leaves[i])  # pymerkle's path starts with the leaf hash
            assert list(ours.inclusion_proof(i, n).hashes) == p.path[1:]
        assert list(disk.inclusion_proof(n // 2, n).hashes) == ref.prove_inclusion(n // 2 + 1, n).path[1:]
    # consistency: pymerkle's proof format differs (it carries its own rule bits), so check that both
    # libraries accept the other's roots: pymerkle verifies its proof against our roots, we verify ours.
    for m, n in [(1, 2), (3, 7), (8, 8), (13, 200), (64, 128), (65, 199)]:
        pymerkle.verify_consistency(ours.root(m), ours.root(n), ref.prove_consistency(m, n))
        verify_consistency(m, n, disk.consistency_proof(m, n).hashes, ref.get_root(m), ref.get_root(n))
    disk.close()


def test_pymerkle_sqlite_tree_agrees(tmp_path):
    import pymerkle

    rng = random.Random(78)
    leaves = [rng.randbytes(16) for _ in range(100)]
    ref = pymerkle.SqliteTree(str(tmp_path / "p.db"))
    ref.append_entries(leaves)
    with SqliteLog(tmp_path / "ours.db") as ours:
        for x in leaves:
            ours.append(x)
        for n in (1, 2, 3, 50, 99, 100):
            assert ours.root(n) == ref.get_root(n)
    ref.close()
