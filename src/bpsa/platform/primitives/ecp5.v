// Simulation model of the Lattice ECP5 MULT18X18D: the subset bpsa instantiates
// (bpsa.gateware.arith.IntArith.multiplier), written from Lattice's sysDSP usage guide (TN1267)
// for simulating generated Verilog built for the ECP5 (bpsa.sim.runner.build_top(device="ecp5")).
// Supported: the A and B input registers and the output register, each off ("NONE") or on
// CLK0 with any CE and RST input; a synchronous reset (RESETMODE "SYNC"); operands from the A
// and B inputs (SOURCEA = SOURCEB = 0); no pipeline register, no shift or cascade ports, no
// C input. A setting outside the subset stops the simulation at time zero.
module MULT18X18D (
    A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6,
    A5, A4, A3, A2, A1, A0, B17, B16, B15, B14, B13, B12,
    B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0,
    C17, C16, C15, C14, C13, C12, C11, C10, C9, C8, C7, C6,
    C5, C4, C3, C2, C1, C0,
    SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK3, CLK2, CLK1, CLK0,
    CE3, CE2, CE1, CE0, RST3, RST2, RST1, RST0,
    P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24,
    P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12,
    P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0
);
  input A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0, B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0, C17, C16, C15, C14, C13, C12, C11, C10, C9, C8, C7, C6, C5, C4, C3, C2, C1, C0;
  input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK3, CLK2, CLK1, CLK0, CE3, CE2, CE1, CE0, RST3, RST2, RST1, RST0;
  output P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0;
  parameter REG_INPUTA_CLK = "NONE";
  parameter REG_INPUTA_CE = "CE0";
  parameter REG_INPUTA_RST = "RST0";
  parameter REG_INPUTB_CLK = "NONE";
  parameter REG_INPUTB_CE = "CE0";
  parameter REG_INPUTB_RST = "RST0";
  parameter REG_INPUTC_CLK = "NONE";
  parameter REG_INPUTC_CE = "CE0";
  parameter REG_INPUTC_RST = "RST0";
  parameter REG_PIPELINE_CLK = "NONE";
  parameter REG_PIPELINE_CE = "CE0";
  parameter REG_PIPELINE_RST = "RST0";
  parameter REG_OUTPUT_CLK = "NONE";
  parameter REG_OUTPUT_CE = "CE0";
  parameter REG_OUTPUT_RST = "RST0";
  parameter CLK0_DIV = "ENABLED";
  parameter CLK1_DIV = "ENABLED";
  parameter CLK2_DIV = "ENABLED";
  parameter CLK3_DIV = "ENABLED";
  parameter HIGHSPEED_CLK = "NONE";
  parameter GSR = "ENABLED";
  parameter CAS_MATCH_REG = "FALSE";
  parameter SOURCEB_MODE = "B_SHIFT";
  parameter MULT_BYPASS = "DISABLED";
  parameter RESETMODE = "SYNC";

  wire [17:0] a = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0};
  wire [17:0] b = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
  wire [3:0] ce = {CE3, CE2, CE1, CE0};
  wire [3:0] rst = {RST3, RST2, RST1, RST0};

  function automatic sel(input [31:0] name, input [3:0] bits);
    // "CEn" / "RSTn" -> bit n (the last character of the name)
    sel = bits[name[1:0]];
  endfunction

  initial begin
    if ((REG_INPUTA_CLK != "NONE" && REG_INPUTA_CLK != "CLK0")
        || (REG_INPUTB_CLK != "NONE" && REG_INPUTB_CLK != "CLK0")
        || (REG_OUTPUT_CLK != "NONE" && REG_OUTPUT_CLK != "CLK0")
        || REG_PIPELINE_CLK != "NONE" || REG_INPUTC_CLK != "NONE"
        || RESETMODE != "SYNC" || MULT_BYPASS != "DISABLED")
      $fatal(1, "MULT18X18D model: a setting outside the modelled subset");
  end

  reg [17:0] a_r = 18'd0;
  reg [17:0] b_r = 18'd0;
  reg [35:0] p_r = 36'd0;
  wire [17:0] a_m = REG_INPUTA_CLK == "NONE" ? a : a_r;
  wire [17:0] b_m = REG_INPUTB_CLK == "NONE" ? b : b_r;
  wire signed [18:0] a_x = {SIGNEDA & a_m[17], a_m};
  wire signed [18:0] b_x = {SIGNEDB & b_m[17], b_m};
  wire signed [37:0] product = a_x * b_x;

  always @(posedge CLK0) begin
    if (sel(REG_INPUTA_RST, rst)) a_r <= 18'd0;
    else if (sel(REG_INPUTA_CE, ce)) a_r <= a;
    if (sel(REG_INPUTB_RST, rst)) b_r <= 18'd0;
    else if (sel(REG_INPUTB_CE, ce)) b_r <= b;
    if (sel(REG_OUTPUT_RST, rst)) p_r <= 36'd0;
    else if (sel(REG_OUTPUT_CE, ce)) p_r <= product[35:0];
  end

  wire [35:0] p = REG_OUTPUT_CLK == "NONE" ? product[35:0] : p_r;
  assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = p;
endmodule
