import Foundation
import WhisperShared

/// A Redis Cluster of the test's own on loopback: six `redis-server --cluster-enabled
/// yes` nodes, made three masters with a replica each by `redis-cli --cluster create`,
/// as durable as the services require.
final class RedisClusterProcess: @unchecked Sendable {
    let ports: [Int]
    let directory: URL
    private var processes: [Int: Process] = [:]

    static var cliBinary: String {
        URL(fileURLWithPath: TestServers.redisServerBinary).deletingLastPathComponent().appendingPathComponent("redis-cli").path
    }

    init(nodes: Int = 6) throws {
        var ports: [Int] = []
        while ports.count < nodes {
            let port = try TestServers.freePort()
            // The cluster bus listens on port + 10000: both must fit and be free.
            if port + 10_000 <= 65_535, !ports.contains(port) { ports.append(port) }
        }
        self.ports = ports
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-cluster-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    var seeds: [RedisCluster.Endpoint] { ports.map { RedisCluster.Endpoint(host: "127.0.0.1", port: $0) } }

    /// Starts the nodes and joins them into a cluster; returns once every node reports
    /// `cluster_state:ok`.
    func start() async throws {
        for port in ports { try startNode(port) }
        let create = Process()
        create.executableURL = URL(fileURLWithPath: Self.cliBinary)
        create.arguments = ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + ["--cluster-replicas", "1", "--cluster-yes"]
        create.standardOutput = FileHandle.nullDevice
        create.standardError = FileHandle.nullDevice
        try create.run()
        create.waitUntilExit()
        guard create.terminationStatus == 0 else { throw TestSetupError("redis-cli --cluster create failed") }
        try await waitUntil(timeout: .seconds(30)) {
            self.ports.allSatisfy { self.cli($0, "CLUSTER", "INFO").contains("cluster_state:ok") }
        }
        // And every master's replica has finished its first sync (a `WAIT` counts it).
        try await waitUntil(timeout: .seconds(30)) {
            let masters = self.ports.map { self.cli($0, "INFO", "replication") }.filter { $0.contains("role:master") }
            return masters.count == self.ports.count / 2 && masters.allSatisfy { $0.contains("state=online") }
        }
    }

    /// The ports of the nodes that are masters now.
    func masterPorts() -> [Int] {
        ports.filter { processes[$0] != nil && cli($0, "ROLE").hasPrefix("master") }
    }

    func startNode(_ port: Int) throws {
        let folder = directory.appendingPathComponent("\(port)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestServers.redisServerBinary)
        process.arguments = [
            "--bind", "127.0.0.1", "--port", "\(port)", "--dir", folder.path, "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--save", "", "--appendonly", "yes",
            "--appendfsync", "always", "--daemonize", "no", "--logfile", folder.appendingPathComponent("redis.log").path,
        ]
        try process.run()
        processes[port] = process
        for _ in 0..<100 {
            if RedisProcess.canConnect(port: port) { return }
            Thread.sleep(forTimeInterval: 0.05) // polling interval
        }
        throw TestSetupError("cluster node did not start on port \(port)")
    }

    /// Runs redis-cli against one node and returns what it printed.
    @discardableResult
    func cli(_ port: Int, _ arguments: String...) -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.cliBinary)
        process.arguments = ["-h", "127.0.0.1", "-p", "\(port)"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return "" }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    /// The node ID of the node on `port`.
    func nodeID(_ port: Int) -> String {
        cli(port, "CLUSTER", "MYID").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// SIGKILL one node, as in a crash.
    func kill(_ port: Int) {
        guard let process = processes[port] else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        processes[port] = nil
    }

    func stop() {
        for port in processes.keys { kill(port) }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }

    /// How the services reach this cluster, as `WHISPER_REDIS_CLUSTER` would set it up:
    /// its nodes as seeds, the work streams in a cluster's default number of shards.
    var configuration: RedisConfiguration {
        var configuration = RedisConfiguration(host: "127.0.0.1", port: ports[0])
        configuration.clusterSeeds = seeds
        configuration.streamShards = .standard(cluster: true)
        configuration.replicaAcks = .standard(cluster: true)
        return configuration
    }

    /// A fresh cluster and a `RedisClient` in cluster mode on it, for `body`.
    static func withClient<T: Sendable>(_ body: (RedisClusterProcess, RedisClient) async throws -> T) async throws -> T {
        let nodes = try RedisClusterProcess()
        defer { nodes.stop() }
        try await nodes.start()
        let client = RedisClient(configuration: nodes.configuration, logger: TestServers.logger)
        let running = Task { try await client.run() }
        defer { running.cancel() }
        try await waitUntil { client.isConnected }
        return try await body(nodes, client)
    }
}
