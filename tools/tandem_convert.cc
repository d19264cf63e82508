// tandem-convert: an ONNX model as Tandem's graph JSON and params file, to
// read, diff or deploy without the importer.
//
//   tandem-convert resnet18.onnx out/resnet18   # out/resnet18.json + out/resnet18.<crc>.params
//
// The model is imported as tandem-run and tandem::import_onnx import it (so
// what the importer refuses is listed the same way), then exported as a
// model Tandem traced would be (serialization/model.h). A bad file is a
// one-line error and exit status 1; bad arguments, usage and status 2.
#include <iostream>
#include <string>

#include "core/error.h"
#include "serialization/onnx_import.h"

int main(int argc, char** argv) {
  if (argc != 3 || !std::string(argv[1]).ends_with(".onnx")) {
    std::cerr << "usage: tandem-convert MODEL.onnx OUT\n"
                 "  writes OUT.json and its params file beside it\n";
    return 2;
  }
  try {
    tandem::import_onnx(argv[1]).export_model(argv[2]);
    std::cout << "wrote " << argv[2] << ".json\n";
  } catch (const tandem::Error& e) {
    std::cerr << "tandem-convert: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
