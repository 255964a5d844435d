import Foundation

#if FUZZING
import CFuzzerDriver

/// libFuzzer's entry (built by scripts/fuzz with `-sanitize=fuzzer -DFUZZING`): the
/// target comes from `WHISPER_FUZZ_TARGET`.
private let selected: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["WHISPER_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        FileHandle.standardError.write(Data("set WHISPER_FUZZ_TARGET to one of: \(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))\n".utf8))
        exit(2)
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    selected.run(bytes)
    return 0
}

/// The process's entry. SwiftPM's debug builds link an executable's `main` to
/// `<target>_main` (so tests can link executables); here that hands over to libFuzzer.
@_cdecl("whisper_fuzz_main")
public func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in
        fuzzOneInput(data, size)
    }
}
#else
/// Without the fuzzer (any ordinary build): replays a corpus, `whisper-fuzz TARGET
/// FILE-OR-FOLDER...`, so every checked-in input runs in the test suite too.
@main
struct Replay {
    static func main() throws {
        let arguments = CommandLine.arguments.dropFirst()
        guard let name = arguments.first, let target = FuzzTarget(rawValue: name) else {
            print("usage: whisper-fuzz {\(FuzzTarget.allCases.map(\.rawValue).joined(separator: "|"))} FILE-OR-FOLDER...")
            exit(2)
        }
        var count = 0
        for path in arguments.dropFirst() {
            for file in try files(at: path) {
                target.run(Array(try Data(contentsOf: file)))
                count += 1
            }
        }
        print("whisper-fuzz \(name): \(count) inputs replayed")
    }

    static func files(at path: String) throws -> [URL] {
        var isFolder: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isFolder) else { return [] }
        let url = URL(fileURLWithPath: path)
        guard isFolder.boolValue else { return [url] }
        return try FileManager.default.contentsOfDirectory(at: url, includingPropertiesForKeys: nil)
            .filter { !$0.lastPathComponent.hasPrefix(".") }
            .sorted { $0.path < $1.path }
    }
}
#endif
