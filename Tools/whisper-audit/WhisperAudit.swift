import ArgumentParser
import Foundation
import WhisperClient
import WhisperProtocol

/// Audits a Whisper server's key directory from outside (docs/key-transparency.md,
/// "Auditing"): reads every epoch from the first through the public endpoints and checks
/// each one (``DirectoryAuditor``). Exits 1 with the finding when a check fails, or when
/// the newest head is older than clients accept (a frozen view).
@main
struct WhisperAudit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "whisper-audit", abstract: "Check every epoch of a Whisper server's key directory."
    )

    @Option(help: "The server's auth base URL (http://127.0.0.1:8081), or its edge origin (https://chat.example.org).")
    var server: String

    @Option(help: "The directory's keys as JSON (what GET /kt/keys answers), to check against instead of asking the server.")
    var keys: String?

    @Flag(help: "Keep following new epochs instead of stopping at the newest.")
    var follow = false

    @Option(help: "Seconds between looks for new epochs when following.")
    var interval = 5

    @Option(help: "The oldest the newest head may be, in seconds, before the view counts as frozen (the directory publishes at least hourly).")
    var maxHeadAge = Int(KeyDirectory.staleHeadAge.components.seconds)

    func run() async throws {
        let base = server.hasSuffix("/") ? String(server.dropLast()) : server
        let pinned = try keys.map { try JSONDecoder().decode(DirectoryKeys.self, from: Data(contentsOf: URL(fileURLWithPath: $0))) }
        let api = WhisperAPI(
            endpoints: WhisperEndpoints(websocket: "ws://unused/ws", auth: base, attachments: base, turn: base),
            directory: DirectoryView(keys: pinned)
        )
        let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
        repeat {
            do {
                let checked = try await auditor.follow(api)
                if checked > 0 || !follow {
                    let epoch = await auditor.epoch, added = await auditor.added, deleted = await auditor.deleted
                    print("checked \(checked) epoch(s); up to epoch \(epoch): \(added) entries added, \(deleted) deleted, every check passed")
                }
            } catch let finding as DirectoryAuditor.Finding {
                print("FAILED: \(finding)")
                throw ExitCode(1)
            }
            // A directory that stops publishing freezes every client's view at its last head.
            if let head = await auditor.head, Double(head.age()) > Double(maxHeadAge) * 1_000 {
                let age = head.age() / 1_000
                print("STALE: the newest head, epoch \(head.epoch), was published \(age) s ago (more than \(maxHeadAge) s): clients refuse it as staleHead")
                throw ExitCode(1)
            }
            if follow { try await Task.sleep(for: .seconds(interval)) }
        } while follow
    }
}
