// Command-line flags for the tutorials: `--name value` options and
// `--name` switches, each with the code that takes it.
//
//   parse_flags(argc, argv,
//               {{"--epochs", [&](const std::string& v) { epochs = std::atoi(v.c_str()); }}},
//               {{"--quick", [&] { quick = true; }}},
//               "--epochs N, --quick");
//
// An unknown flag, or an option without its value, is a tandem::Error that
// lists `expected`.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/error.h"

inline void parse_flags(
    int argc, char** argv,
    const std::map<std::string, std::function<void(const std::string&)>>& options,
    const std::map<std::string, std::function<void()>>& switches, const std::string& expected) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (auto option = options.find(arg); option != options.end()) {
      TANDEM_CHECK(i + 1 < argc, "flag ", arg, " needs a value");
      option->second(argv[++i]);
    } else if (auto flag = switches.find(arg); flag != switches.end()) {
      flag->second();
    } else {
      TANDEM_CHECK(false, "unknown flag '", arg, "'; expected ", expected);
    }
  }
}
