import Testing
import WhisperProtocol

/// The key directory's epoch log against Certificate Transparency's reference tree (the
/// eight leaves of its test data, their roots and proofs), then every proof of every
/// tree up to 40 leaves made and checked, and none that is changed in any way.
@Suite struct LogTreeTests {
    static let data: [[UInt8]] = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"].map(VectorTests.hex)
    static let roots = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d", "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77", "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4", "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c", "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]

    @Test func theReferenceTreesRootsAndProofs() {
        let leaves = Self.data.map(LogTree.leafHash)
        #expect(LogTree.root([]).hexString == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        for size in 1...8 { #expect(LogTree.root(Array(leaves.prefix(size))).hexString == Self.roots[size - 1], "size \(size)") }
        let inclusions: [(Int, Int, [String])] = [
            (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
            (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b", "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
            (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
        ]
        for (index, size, path) in inclusions {
            #expect(LogTree.inclusionProof(index, leaves.prefix(size)[...]).map(\.hexString) == path, "leaf \(index) of \(size)")
        }
        let consistencies: [(Int, Int, [String])] = [
            (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
            (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a", "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
            (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e", "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
        ]
        for (old, new, path) in consistencies {
            #expect(LogTree.consistencyProof(old, leaves.prefix(new)[...]).map(\.hexString) == path, "\(old) to \(new)")
        }
    }

    @Test func everyProofOfEveryTreeChecksOutAndNoChangedOneDoes() {
        let leaves = (0..<40).map { LogTree.leafHash([UInt8($0), UInt8(($0 * 7) & 0xff)]) }
        let roots = (0...leaves.count).map { LogTree.root(Array(leaves.prefix($0))) }
        for size in 1...leaves.count {
            let tree = leaves.prefix(size)[...]
            for index in 0..<size {
                let proof = LogTree.inclusionProof(index, tree)
                #expect(LogTree.verifyInclusion(leaf: leaves[index], index: index, size: size, proof: proof, root: roots[size]))
                #expect(!LogTree.verifyInclusion(leaf: LogTree.leafHash([0xff]), index: index, size: size, proof: proof, root: roots[size]))
                if size > 1 {
                    #expect(!LogTree.verifyInclusion(leaf: leaves[index], index: (index + 1) % size, size: size, proof: proof, root: roots[size]))
                    var bent = proof
                    bent[bent.count - 1][0] ^= 1
                    #expect(!LogTree.verifyInclusion(leaf: leaves[index], index: index, size: size, proof: bent, root: roots[size]))
                }
            }
            for old in 1...size {
                let proof = LogTree.consistencyProof(old, tree)
                #expect(LogTree.verifyConsistency(oldSize: old, newSize: size, oldRoot: roots[old], newRoot: roots[size], proof: proof), "\(old) to \(size)")
                guard old < size else { continue }
                // Another old root (a rewritten history), or any proof hash changed, fails.
                #expect(!LogTree.verifyConsistency(oldSize: old, newSize: size, oldRoot: LogTree.leafHash([0xee]), newRoot: roots[size], proof: proof))
                for position in proof.indices {
                    var bent = proof
                    bent[position][31] ^= 1
                    #expect(!LogTree.verifyConsistency(oldSize: old, newSize: size, oldRoot: roots[old], newRoot: roots[size], proof: bent))
                }
                #expect(!LogTree.verifyConsistency(oldSize: old, newSize: size, oldRoot: roots[old], newRoot: roots[size], proof: Array(proof.dropLast())))
            }
        }
    }
}
