import Foundation
import PackagePlugin

/// Embeds a target's Redis scripts (`.lua`) and web assets (`.html`, `.css`, `.js`) as
/// string constants (`LuaSource`, `WebAssets`: generated Swift, compiled with the
/// target), so each is kept and reviewed in its own language and ships inside the
/// executable, with nothing to install beside it. The work is `embed-files.sh`, beside
/// this file.
@main
struct EmbedFiles: BuildToolPlugin {
    static let extensions: Set<String> = ["lua", "html", "css", "js"]

    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { return [] }
        let files = target.sourceFiles.map(\.url).filter { Self.extensions.contains($0.pathExtension) }.sorted { $0.path < $1.path }
        guard !files.isEmpty else { return [] }
        let script = context.package.directoryURL.appending(path: "Plugins/EmbedFiles/embed-files.sh")
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedFiles.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(files.count) files of \(target.name)",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: [script.path, output.path] + files.map(\.path),
                inputFiles: [script] + files,
                outputFiles: [output]
            ),
        ]
    }
}
