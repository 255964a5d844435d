import Foundation

/// What the server under test spends, from `/proc`: CPU of the `--server-pid` processes and
/// their children, the machine's busy share, and PSS, sampled at the start and end of the
/// measured window.
struct ServerUsage {
    let roots: [Int32]

    struct Sample {
        /// CPU ticks (user and system) of every process of the server.
        var ticks: Int64
        /// The machine's CPU ticks: all of them, and those idle or waiting.
        var machineTicks: Int64
        var machineIdleTicks: Int64
    }

    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// Every process of the server now: the roots and their descendants.
    func processes() -> [Int32] {
        var children: [Int32: [Int32]] = [:]
        for (pid, stat) in Self.allStats() {
            if let parent = Self.field(4, of: stat).flatMap({ Int32($0) }) { children[parent, default: []].append(pid) }
        }
        var found: [Int32] = []
        var queue = roots
        while let pid = queue.popLast() {
            guard !found.contains(pid) else { continue }
            found.append(pid)
            queue += children[pid] ?? []
        }
        return found
    }

    func sample() -> Sample {
        var ticks: Int64 = 0
        for pid in processes() {
            guard let stat = Self.stat(pid) else { continue }
            ticks += (Self.field(14, of: stat).flatMap { Int64($0) } ?? 0) + (Self.field(15, of: stat).flatMap { Int64($0) } ?? 0)
        }
        var machine: Int64 = 0
        var idle: Int64 = 0
        if let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
           let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) {
            let values = line.split(separator: " ").dropFirst().compactMap { Int64($0) }
            machine = values.reduce(0, +)
            // idle and iowait.
            idle = (values.count > 4 ? values[3] + values[4] : 0)
        }
        return Sample(ticks: ticks, machineTicks: machine, machineIdleTicks: idle)
    }

    /// The server's proportional resident memory, KiB.
    func proportionalKiB() -> Int {
        processes().reduce(0) { total, pid in
            guard let text = try? String(contentsOfFile: "/proc/\(pid)/smaps_rollup", encoding: .utf8),
                  let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Pss:") }) else { return total }
            return total + (line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0)
        }
    }

    /// A line for the report: server CPU per message delivered between the samples, the
    /// machine's busy share then, and memory now.
    func report(from start: Sample, to end: Sample, delivered: Int) -> String {
        let cpuMs = Double(end.ticks - start.ticks) * 1000 / Self.ticksPerSecond
        let machine = Double(max(1, end.machineTicks - start.machineTicks))
        let busy = 100 * (machine - Double(end.machineIdleTicks - start.machineIdleTicks)) / machine
        return String(
            format: "server CPU: %.1f us per message delivered in the window (%d processes); machine busy %.1f %%; server memory (PSS) %.1f MB",
            cpuMs * 1000 / Double(max(delivered, 1)), processes().count, busy, Double(proportionalKiB()) / 1024
        )
    }

    private static func allStats() -> [(Int32, String)] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return names.compactMap { name in Int32(name).flatMap { pid in stat(pid).map { (pid, $0) } } }
    }

    private static func stat(_ pid: Int32) -> String? {
        try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
    }

    /// Field `number` of a stat line, numbered as proc(5) numbers them (4 the parent, 14
    /// and 15 user and system time), read after the command name, which may hold spaces.
    private static func field(_ number: Int, of stat: String) -> Substring? {
        guard let close = stat.lastIndex(of: ")") else { return nil }
        let rest = stat[stat.index(after: close)...].split(separator: " ")
        // What follows the name starts with field 3, the state.
        let position = number - 3
        return position >= 0 && position < rest.count ? rest[position] : nil
    }
}
