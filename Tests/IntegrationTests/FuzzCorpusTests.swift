import Foundation
import Testing

/// Every input of the fuzzer's checked-in corpus (seeds and past findings) goes through
/// its target again in each test run, without the fuzzer: `whisper-fuzz TARGET FOLDER`.
@Suite struct FuzzCorpusTests {
    @Test(arguments: ["frames", "resp", "commands", "settings", "signatures"])
    func everyCorpusInputPassesItsTarget(target: String) throws {
        let folder = TestServers.repoRoot.appendingPathComponent("Tests/Fuzz/corpus/\(target)")
        let inputs = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.count
        #expect(inputs > 0)
        let (process, output) = try Executables.launch("whisper-fuzz", arguments: [target, folder.path], environment: [:])
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(text.suffix(2_000))")
        #expect(text.contains("whisper-fuzz \(target): \(inputs) inputs replayed"), "\(text.suffix(500))")
    }
}
