// The lab's run: the cells of its grids, each trained once (examples/lab/cell.h)
// and kept in DIR/cells/<id>.csv, so a lab run again skips the cells it has
// finished; then results.csv, the plots and lab_report.html from every cell
// (examples/lab/report.h).
//
// The cells are shared out: with --jobs N the lab starts N processes of itself,
// process i training cells i, i + N, ...; under mpirun each rank does the same
// with its rank, and rank 0 writes the results once every rank is done.
#pragma once
#include <string>
#include <vector>

#include "examples/lab/cell.h"
#include "examples/lab/grid.h"

namespace ag::lab {

// The lab's own options, from the table in examples/lab/lab_options.h.
struct LabOptions {
  AG_DECLARE_OPTIONS(AG_LAB_OPTIONS)
};

struct LabSpec {
  LabOptions options;
  std::vector<Grid> grids;  // a preset's grids, or the command line's one
  Cell defaults;
  std::string command;      // the command line, for the report
  std::vector<std::string> arguments;  // argv[1..], for --jobs' processes
  bool quiet = false;       // no progress lines (tests)
};

// A preset's grids and lab options, as option name -> comma list (the command
// line's text). Throws naming the presets for an unknown name.
struct Preset {
  std::vector<std::vector<std::pair<std::string, std::string>>> grids;
  std::vector<std::pair<std::string, std::string>> lab_options;
};
Preset preset(const std::string& name);

// Every cell of the spec's grids, in order; a cell named again (a value repeated
// in a list, or two grids that meet, as a preset's do when an option replaces
// the axis they differ in) appears once.
std::vector<Cell> lab_cells(const LabSpec& spec);

struct LabSummary {
  int64_t cells = 0;    // in the grids
  int64_t trained = 0;  // by this process, now
  int64_t skipped = 0;  // finished before (resumed)
  double seconds = 0;
  std::vector<Row> rows;  // results.csv's (where this process wrote it)
};
LabSummary run_lab(const LabSpec& spec);

}  // namespace ag::lab
