import Foundation

/// Geohash cells (base 32, `0123456789bcdefghjkmnpqrstuvwxyz`): a client reports the
/// cell it is in, never its coordinates. Precision 5 is about 4.9 km by 4.9 km.
public enum Geohash {
    public static let alphabet = Array("0123456789bcdefghjkmnpqrstuvwxyz")
    /// The precision of the cells channels are announced in and looked for.
    public static let nearbyPrecision = 5

    public static func isCell(_ cell: String) -> Bool {
        cell.count == nearbyPrecision && cell.allSatisfy { alphabet.contains($0) }
    }

    /// The cell of a point (latitude -90...90, longitude -180...180).
    public static func encode(latitude: Double, longitude: Double, precision: Int = nearbyPrecision) -> String {
        var lat = (-90.0, 90.0), lon = (-180.0, 180.0)
        var result = "", bits = 0, value = 0, even = true
        while result.count < precision {
            if even {
                let mid = (lon.0 + lon.1) / 2
                if longitude >= mid { value = value << 1 | 1; lon.0 = mid } else { value <<= 1; lon.1 = mid }
            } else {
                let mid = (lat.0 + lat.1) / 2
                if latitude >= mid { value = value << 1 | 1; lat.0 = mid } else { value <<= 1; lat.1 = mid }
            }
            even.toggle()
            bits += 1
            if bits == 5 {
                result.append(alphabet[value])
                bits = 0
                value = 0
            }
        }
        return result
    }

    /// The cell's bounds: (latitude min, max, longitude min, max); nil for a string that is no cell.
    public static func bounds(_ cell: String) -> (Double, Double, Double, Double)? {
        var lat = (-90.0, 90.0), lon = (-180.0, 180.0), even = true
        for character in cell {
            guard let index = alphabet.firstIndex(of: character) else { return nil }
            for shift in stride(from: 4, through: 0, by: -1) {
                let bit = (index >> shift) & 1
                if even {
                    let mid = (lon.0 + lon.1) / 2
                    if bit == 1 { lon.0 = mid } else { lon.1 = mid }
                } else {
                    let mid = (lat.0 + lat.1) / 2
                    if bit == 1 { lat.0 = mid } else { lat.1 = mid }
                }
                even.toggle()
            }
        }
        return (lat.0, lat.1, lon.0, lon.1)
    }

    /// The cell and the (up to) eight around it.
    public static func withNeighbours(_ cell: String) -> [String] {
        guard let (south, north, west, east) = bounds(cell) else { return [] }
        let height = north - south, width = east - west
        let latitude = (south + north) / 2, longitude = (west + east) / 2
        var cells: [String] = []
        for dy in -1...1 {
            let y = latitude + Double(dy) * height
            guard y > -90, y < 90 else { continue }
            for dx in -1...1 {
                var x = longitude + Double(dx) * width
                if x >= 180 { x -= 360 } else if x < -180 { x += 360 }
                let neighbour = encode(latitude: y, longitude: x, precision: cell.count)
                if !cells.contains(neighbour) { cells.append(neighbour) }
            }
        }
        return cells
    }
}
