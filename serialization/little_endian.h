// Little-endian integers in byte buffers: the byte order of every binary
// field in Tandem's files (params, .npy headers), whatever the host's.
//
//   std::string out;
//   append_le<uint32_t>(out, 0x01020304);             // bytes 04 03 02 01
//   load_le<uint32_t>(reinterpret_cast<const uint8_t*>(out.data()));  // 0x01020304
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace tandem::serialization {

template <class T>
void append_le(std::string& out, T value) {
  static_assert(std::is_unsigned_v<T>);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

// Reads sizeof(T) bytes at `bytes`, which the caller has bounds-checked.
template <class T>
T load_le(const uint8_t* bytes) {
  static_assert(std::is_unsigned_v<T>);
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<T>(bytes[i]) << (8 * i));
  return value;
}

}  // namespace tandem::serialization
